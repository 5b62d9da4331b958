#!/usr/bin/env bash
# One GPU visit of issue 32, sized to a 15-minute device lease: a first step (the pre-flight smoke test, or the
# profiler rows of one shape), then a bench sweep or a training-step run for as long as the rest of the
# deadline allows, every results file packed into OUT as soon as it is finished.
#
#   benchmarks/gpu_visit.sh OUT DEADLINE_S [SMOKE|NOSMOKE|ROWS=M,K,N] [bench options...]
#   benchmarks/gpu_visit.sh OUT DEADLINE_S [SMOKE|NOSMOKE|ROWS=M,K,N] train_step [train_step.py options...]
#
# Run from the checkout's root on the GPU machine, with torchao's wheel in .whl/ (README: "On a bare GPU
# machine"). DEADLINE_S counts from the start of this script: the first step is stopped at 300 s (or at the
# deadline less 45 s, if sooner), and the sweep's --time-budget (or the training-step run's time limit) is
# what is left minus 45 s for packing, so the script ends before a job limit of DEADLINE_S + 60 s. What comes
# back (the device tool returns at most 8 files, 16 MiB each; a packed file over 15 MiB comes back in parts,
# NAME.part-aa, -ab, ...: `cat NAME.part-* > NAME`):
#   OUT/visit.log        this script's own lines: what ran, for how long, with what exit status
#   OUT/machine.txt      nvidia-smi -q (clocks, power, driver) before anything ran
#   OUT/smoke.tar.gz     smoke.log, the smoke test's results folders and its profiler traces (SMOKE, ROWS=)
#   OUT/bench.log        the sweep's output                        (bench options)
#   OUT/sweep.tar.gz     the sweep's results folder (JSON Lines run files), to resume or fit: sweep/ for
#                        the grid, model/ for `--model`, grouped/ for `--grouped`
#   OUT/train.log        train_step.py's output                    (train_step)
#   OUT/train.tar.gz     its JSON report
#   OUT/traces.tar       its profiler traces, one gzipped step per variant
# RESUME=DIR (environment) copies DIR's run files into the sweep's folder first, so that a sweep begun on an
# earlier visit (its results committed) continues where it stopped instead of starting again. On a warm
# machine (a second command within its idle window) the sweep folders are kept and resume by themselves; the
# smoke test's, the training steps' and the traces' folders start empty every time.
# Without a GPU every step fails as it says (exit 2) and the script still packs what there is and exits 2.
set -u
usage="usage: gpu_visit.sh OUT DEADLINE_S [SMOKE|NOSMOKE|ROWS=M,K,N] [bench options... | train_step options...]"
out=${1:?$usage}
deadline=${2:?$usage}
first=${3:-SMOKE}
shift $(($# < 3 ? $# : 3))
case $deadline in '' | *[!0-9]*) echo "DEADLINE_S must be whole seconds, not '$deadline'" >&2; exit 2 ;; esac
case $first in
    SMOKE | NOSMOKE | ROWS=*,*,*) ;;
    *) echo "the third argument is SMOKE, NOSMOKE or ROWS=M,K,N, not '$first'" >&2; exit 2 ;;
esac

work=/tmp/fp8advisor-visit
mkdir -p "$out" "$work"
start=$SECONDS
log() { echo "[visit +$((SECONDS - start))s] $*" | tee -a "$out/visit.log"; }
# pack NAME [tar options] FOLDER...: FOLDERs of $work into OUT/NAME, in parts when it is over 15 MiB
pack() {
    local name=$1
    shift
    tar -cf "$out/$name" -C "$work" "$@" 2>>"$out/visit.log" || { log "packing $name failed"; return; }
    if [ "$(stat -c %s "$out/$name")" -gt $((15 * 1024 * 1024)) ]; then
        split -b 15M "$out/$name" "$out/$name.part-" && rm "$out/$name"
        log "packed $name in $(ls "$out/$name".part-* | wc -l) parts"
    else
        log "packed $name: $(stat -c %s "$out/$name") bytes"
    fi
}

export PYTHONUNBUFFERED=1 TORCHAO_FORCE_SKIP_LOADING_SO_FILES=1
if ! PYTHONPATH=/tmp/site python3 -c 'import torchao' 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/torchao-0.18.0-*.whl \
        >>"$out/visit.log" 2>&1 || log "torchao's wheel did not install (is it in .whl/?)"
fi
export PYTHONPATH=/tmp/site:$PWD
log "python $(python3 -c 'import sys; print(sys.version.split()[0])'), PYTHONPATH=$PYTHONPATH"
nvidia-smi -q >"$out/machine.txt" 2>&1 || log "nvidia-smi failed (no GPU?)"

status=0
if [ "$first" != NOSMOKE ]; then
    rows=()
    [ "$first" = SMOKE ] || rows=(--rows-at "${first#ROWS=}")
    limit=$((deadline - 45 < 300 ? deadline - 45 : 300))
    rm -rf "$work/smoke"  # a second smoke test would resume the first one's points and measure nothing
    log "smoke test${rows[*]:+ ${rows[*]}}: started (stopped at $limit s)"
    timeout -s INT -k 20 "$limit" python3 benchmarks/gpu_smoke.py --out "$work/smoke" "${rows[@]}"
    code=$?
    log "smoke test: exit $code (0 all checks ok, 1 a check failed, 2 no FP8 GPU, 124 stopped at $limit s)"
    [ $code -eq 0 ] || status=$code
    pack smoke.tar.gz -z smoke
fi

budget=$((deadline - (SECONDS - start) - 45))
if [ $# -eq 0 ]; then
    log "nothing more to run"
elif [ $budget -lt 90 ]; then
    log "$1: not started, $budget s left of the deadline is too little"
elif [ "$1" = train_step ]; then
    shift
    rm -rf "$work/train" "$work/traces"
    log "training steps: train_step.py $* (stopped at $budget s)"
    timeout -s INT -k 20 "$budget" python3 benchmarks/train_step.py "$@" \
        --out "$work/train/train-step.json" --trace-dir "$work/traces" 2>&1 | tee "$out/train.log"
    code=${PIPESTATUS[0]}
    log "training steps: exit $code (124: stopped by the script's own limit; the report keeps every variant done)"
    [ $code -eq 0 ] || status=$code
    pack train.tar.gz -z train
    pack traces.tar traces
else
    folder=sweep
    case " $* " in *" --model "* | *" --model="*) folder=model ;; *" --grouped "*) folder=grouped ;; esac
    mkdir -p "$work/$folder"
    if [ -n "${RESUME:-}" ]; then
        if cp "$RESUME"/run-*.jsonl "$work/$folder/"; then
            log "resuming the runs of $RESUME"
        else
            log "RESUME=$RESUME: no run files copied from there, so nothing is resumed"
        fi
    fi
    log "sweep: bench $* --out $folder --time-budget $budget"
    timeout -s INT -k 20 $((budget + 25)) \
        python3 -m fp8advisor bench "$@" --out "$work/$folder" --time-budget "$budget" --no-png 2>&1 |
        tee "$out/bench.log"
    code=${PIPESTATUS[0]}
    log "sweep: exit $code (124: stopped by the script's own limit)"
    [ $code -eq 0 ] || status=$code
    pack sweep.tar.gz -z "$folder"
fi
log "done, exit $status"
exit $status
