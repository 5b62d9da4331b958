#!/usr/bin/env bash
# One GPU visit of issue 32, sized to a 15-minute device lease: the pre-flight smoke test, then as much of a
# bench sweep as the rest of the deadline allows, every results file packed into OUT as it is finished.
#
#   benchmarks/gpu_visit.sh OUT DEADLINE_S [SMOKE|NOSMOKE] [bench options...]
#
# Run from the checkout's root on the GPU machine, with torchao's wheel in .whl/ (README: "On a bare GPU
# machine"). DEADLINE_S counts from the start of this script: the smoke test is stopped at 300 s, and the
# sweep's --time-budget is what is left minus 45 s for packing, so the script ends before a job limit of
# DEADLINE_S + 60 s. What comes back (at most 8 files, one folder deep):
#   OUT/visit.log        this script's own lines: what ran, for how long, with what exit status
#   OUT/machine.txt      nvidia-smi -q (clocks, power, driver) before anything ran
#   OUT/smoke.tar.gz     smoke.log and the smoke test's results folders
#   OUT/bench.log        the sweep's output
#   OUT/sweep.tar.gz     the sweep's results folder (JSON Lines run files), to resume or fit
# Without a GPU every step fails as it says (exit 2) and the script still packs what there is and exits 2.
set -u
out=${1:?usage: gpu_visit.sh OUT DEADLINE_S [SMOKE|NOSMOKE] [bench options...]}
deadline=${2:?usage: gpu_visit.sh OUT DEADLINE_S [SMOKE|NOSMOKE] [bench options...]}
smoke=${3:-SMOKE}
shift $(($# < 3 ? $# : 3))
case $deadline in '' | *[!0-9]*) echo "DEADLINE_S must be whole seconds, not '$deadline'" >&2; exit 2 ;; esac
case $smoke in SMOKE | NOSMOKE) ;; *) echo "the third argument is SMOKE or NOSMOKE, not '$smoke'" >&2; exit 2 ;; esac

work=/tmp/fp8advisor-visit
mkdir -p "$out" "$work"
start=$SECONDS
log() { echo "[visit +$((SECONDS - start))s] $*" | tee -a "$out/visit.log"; }
pack() { tar -czf "$out/$1" -C "$work" "${@:2}" 2>>"$out/visit.log" && log "packed $1: $(ls "$work/$2" | wc -l) entries"; }

export PYTHONUNBUFFERED=1 TORCHAO_FORCE_SKIP_LOADING_SO_FILES=1
if ! python3 -c 'import torchao' 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/torchao-0.18.0-*.whl \
        >>"$out/visit.log" 2>&1 || log "torchao's wheel did not install (is it in .whl/?)"
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
log "python $(python3 -c 'import sys; print(sys.version.split()[0])'), PYTHONPATH=$PYTHONPATH"
nvidia-smi -q >"$out/machine.txt" 2>&1 || log "nvidia-smi failed (no GPU?)"

status=0
if [ "$smoke" = SMOKE ]; then
    log "smoke test: started"
    timeout -s INT -k 20 300 python3 benchmarks/gpu_smoke.py --out "$work/smoke"
    code=$?
    log "smoke test: exit $code (0 all checks ok, 1 a check failed, 2 no FP8 GPU, 124 stopped at 300 s)"
    [ $code -eq 0 ] || status=$code
    pack smoke.tar.gz smoke
fi

budget=$((deadline - (SECONDS - start) - 45))
if [ $# -eq 0 ]; then
    log "no bench options: no sweep"
elif [ $budget -lt 90 ]; then
    log "sweep: not started, $budget s left of the deadline is too little"
else
    log "sweep: bench $* --time-budget $budget"
    timeout -s INT -k 20 $((budget + 25)) \
        python3 -m fp8advisor bench "$@" --out "$work/sweep" --time-budget "$budget" --no-png 2>&1 |
        tee "$out/bench.log"
    code=${PIPESTATUS[0]}
    log "sweep: exit $code (124: stopped by the script's own limit)"
    [ $code -eq 0 ] || status=$code
    pack sweep.tar.gz sweep
fi
log "done, exit $status"
exit $status
