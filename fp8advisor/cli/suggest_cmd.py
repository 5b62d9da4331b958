"""`fp8advisor suggest`: per-layer float8 advice, an exact filter list and a ready training config."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer
from rich.text import Text

from fp8advisor.advice.decide import advise
from fp8advisor.advice.linears import default_predictor
from fp8advisor.advice.records import Advice
from fp8advisor.cli.application import command, console, err_console, warn_passed_over
from fp8advisor.cli.current_view import print_current, print_current_brief
from fp8advisor.cli.parallel_options import ParallelOptions, step_config_of
from fp8advisor.cli.step_view import print_step
from fp8advisor.cli.suggest_view import print_brief, print_in_context, print_report
from fp8advisor.cli.terminal import plain
from fp8advisor.emit.config_file import (
    check,
    check_format_recipe,
    check_format_target,
    format_warnings,
    leaves_fp8_off,
    read_committed,
    render,
    what_the_file_does,
    write,
)
from fp8advisor.emit.header import pinned_command
from fp8advisor.errors import AdvisorError, ConfigError
from fp8advisor.files import guard_output
from fp8advisor.frameworks.formats import FILE_FORMATS, ConfigFormat, parse_format
from fp8advisor.gpus import get_specs
from fp8advisor.json_output import print_document
from fp8advisor.recipes import ALL_RECIPES, Recipe, parse_recipe
from fp8advisor.request import AUTO, DEFAULT_BATCH, DEFAULT_MIN_SPEEDUP, DEFAULT_SEQ, SuggestRequest

_FORMATS = ", ".join(f.value for f in FILE_FORMATS)


def _choices_help(lead: str, names: list[str], width: int = 48) -> str:
    """Help text listing `names` whole: lines broken between names, never inside one ("nemo-" / "automodel"
    is what Click's wrapping does to a hyphenated name); Click keeps the lines of a paragraph led by \\b."""
    lines, line = [lead], ""
    for name in names:
        if line and len(line) + len(name) + 2 > width:
            lines.append(line + ",")
            line = ""
        line = f"{line}, {name}" if line else name
    return "\b\n" + "\n".join([*lines, line + "."])


def _format_for(fmt: str | None, path: str | None) -> ConfigFormat | None:
    """--format, or the one a file name implies (.toml: torchtitan-toml, .json: filter)."""
    if fmt is not None:
        return parse_format(fmt)
    if path is None:
        return None
    lowered = path.lower()
    if lowered.endswith(".toml"):
        return ConfigFormat.TORCHTITAN_TOML
    if lowered.endswith(".json"):
        return ConfigFormat.FILTER
    raise AdvisorError(f"which config format should {path} hold?", hint=f"add --format (one of: {_FORMATS})")


def _input_files(target: str, *others: str | None) -> list[Path]:
    """The files `suggest` reads, which -o must never replace: the model file (or config.json), the
    profiles given as paths and the --current config. (Not `target.parse_target`: that also checks the file
    exists, which is the model loader's error to give.)"""
    path = Path(target.split(":", 1)[0])
    if path.is_dir():
        path = path / "config.json"
    return [path] + [Path(other) for other in others if other is not None]


@command("suggest", short_help="Advise which Linear layers to convert; write the training config.")
def suggest(
    target: str = typer.Argument(
        ...,
        help="The model: model.py[:factory(args)], a HF config.json or directory, a Hub id (org/name), or "
        "torchtitan:MODEL/FLAVOR.",
    ),
    batch: int = typer.Option(DEFAULT_BATCH, "--batch", help="Sequences per step on one GPU."),
    seq: int = typer.Option(DEFAULT_SEQ, "--seq", help="Tokens per sequence."),
    recipe: str = typer.Option(
        AUTO,
        "--recipe",
        help="tensorwise, rowwise, rowwise_with_gw_hp, mxfp8 (= mxfp8_rceil) or mxfp8_rceil_wgrad_with_hp "
        "(Blackwell), or auto: of the recipes this GPU runs and whose figures have the "
        "strongest provenance (measured, then evidence, then published, then modelled), the one with the "
        "highest predicted step speedup (batch x seq on one GPU; without a step model, the lowest predicted "
        "Linear time); recipes with weaker figures are not ranked against them (torchtitan-py: no "
        "tensorwise).",
    ),
    profile: str | None = typer.Option(
        None, "--profile", help="Profile name or path (default: the best one for this GPU type)."
    ),
    grouped_profile: str | None = typer.Option(
        None,
        "--grouped-profile",
        help="MoE: profile name or path of the experts' grouped GEMM figures (`fit` of `bench --grouped`; "
        "default: the profile's own, else the best one for its GPU type, else the grouped roofline).",
    ),
    min_speedup: float = typer.Option(
        DEFAULT_MIN_SPEEDUP,
        "--min-speedup",
        help="Convert a layer when its predicted speedup reaches this. The point prediction decides; a layer "
        "whose interval holds it is marked uncertain (?), and `bench` on your GPU settles it.",
    ),
    tensor_parallel: int = typer.Option(
        1, "--tp", help="Tensor-parallel degree (each GPU multiplies a slice)."
    ),
    expert_parallel: int = typer.Option(
        1,
        "--ep",
        help="MoE: expert-parallel degree P (each GPU holds E / P experts and multiplies the rows routed to "
        "them from P GPUs' tokens); must divide every expert group's E.",
    ),
    fmt: str | None = typer.Option(
        None, "--format", help=_choices_help("Config to write:", [f.value for f in FILE_FORMATS])
    ),
    output: str | None = typer.Option(None, "-o", "--output", help="Write the config to this file."),
    check_file: str | None = typer.Option(
        None, "--check", help="Exit 0 if FILE equals what would be written now, 1 with a diff otherwise."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the advice as one JSON document."),
    force: bool = typer.Option(
        False, "--force", help="Let -o replace a file that fp8advisor did not write (its inputs never)."
    ),
    gpu: str | None = typer.Option(
        None, "--gpu", help="GPU of the step model and profile: H100, H200, B200, ... (default: this one)."
    ),
    world_size: int | None = typer.Option(
        None, "--world-size", help="GPUs in the job (default: 1, or --nodes x --gpus-per-node)."
    ),
    context_parallel: int = typer.Option(
        1, "--cp", help="Context-parallel degree (each GPU holds 1/cp of every sequence)."
    ),
    pipeline_parallel: int = typer.Option(1, "--pp", help="Pipeline-parallel degree (1F1B schedule)."),
    dp_replicate: int = typer.Option(1, "--dp-replicate", help="HSDP: replicas of the FSDP group."),
    dp_shard: int | None = typer.Option(
        None, "--dp-shard", help="FSDP degree (default: what the world size leaves after the other degrees)."
    ),
    nodes: int | None = typer.Option(None, "--nodes", help="Nodes in the job (sets --world-size)."),
    gpus_per_node: int | None = typer.Option(
        None, "--gpus-per-node", help="GPUs per NVLink domain (default: the GPU system's, e.g. 8; GB200 72)."
    ),
    inter_node_gbps: float | None = typer.Option(
        None, "--inter-node-gbps", help="Network bandwidth per GPU across nodes, Gb/s (default: datasheet)."
    ),
    async_tp: bool = typer.Option(
        False, "--async-tp", help="TP collectives overlap their GEMMs (torchtitan's async TP)."
    ),
    ac: str = typer.Option("none", "--ac", help="Activation checkpointing: none, selective or full."),
    grad_accum: int = typer.Option(1, "--grad-accum", help="Micro-steps per optimizer step."),
    float8_all_gather: bool = typer.Option(
        False, "--float8-all-gather", help="FSDP all-gathers converted weights in float8 (tensorwise)."
    ),
    expert_imbalance: float = typer.Option(
        1.0,
        "--expert-imbalance",
        help="MoE: the busiest expert's rows over the mean (1.0: balanced routing; the others share the "
        "rest equally). Experts are decided at balanced routing; X > 1 adds each group's speedup range over "
        "imbalances from 1 to X.",
    ),
    measured: str | None = typer.Option(
        None,
        "--measured",
        help="Decide the measured blocks from these in-context results (bench --model --out DIR); default: "
        "the profile directory's in-context/ when it holds this model's, for this GPU and token count.",
    ),
    trace: str | None = typer.Option(
        None,
        "--trace",
        help="Speedups measured in your own training step (fp8advisor trace BF16 FLOAT8 -o FILE): the layers "
        "of the shapes measured there, for the recipe traced, are decided by them, above any profile.",
    ),
    current: str | None = typer.Option(
        None,
        "--current",
        help="Your config now (any format verify reads, or a filter list): which layers it trains in float8 "
        "and its predicted step, beside the advice's. Only read.",
    ),
) -> None:
    """Decide layer by layer where float8 pays, and write the config that converts exactly those layers."""
    request = SuggestRequest(
        target=target,
        batch=batch,
        seq=seq,
        recipe=recipe,
        profile=profile,
        min_speedup=min_speedup,
        tensor_parallel=tensor_parallel,
        measured=measured,
        expert_parallel=expert_parallel,
        grouped_profile=grouped_profile,
        expert_imbalance=expert_imbalance,
        float8_all_gather=float8_all_gather,
        context_parallel=context_parallel,
        trace=trace,
    )
    if recipe != AUTO:
        parse_recipe(recipe)  # a clear error before the model is built
    step_config = step_config_of(
        ParallelOptions(
            world_size,
            tensor_parallel,
            context_parallel,
            pipeline_parallel,
            dp_replicate,
            dp_shard,
            nodes,
            gpus_per_node,
            inter_node_gbps,
            async_tp,
        ),
        ac,
        grad_accum,
        float8_all_gather,
        recipe,
        None if gpu is None else get_specs(gpu).family,  # an unknown GPU fails before the work
    )
    current_file = _read_current(current)  # a file that cannot be used fails before the work
    destination = _destination(
        request, fmt, output, check_file, as_json=as_json, force=force, current=current
    )

    model_layers, choice, advice, predictor = _advise(request, destination, gpu)
    step = None
    if destination.shows_step or current_file is not None:
        with err_console.status("predicting the training step ..."):
            step = _step_report(advice, model_layers, choice, gpu, step_config)
    _warn_about_format(advice, destination.config_format)

    current_step = None
    if current_file is not None:
        current_step = _current_step(current_file, request, advice, model_layers, choice, gpu, step)
    if destination.check_file is not None:
        print_current_brief(current_step)
        _check_committed(advice, request, destination, predictor)
        return
    text = _write_config(advice, request, destination, predictor)
    _print_advice(advice, destination, predictor, text, step, current_step)


@dataclass(frozen=True)
class _Destination:
    """Where the advice goes: a config of `config_format` (to -o's file, else to stdout), a comparison with
    the committed --check file, or the terminal (with --json, one JSON document)."""

    config_format: ConfigFormat | None
    output: str | None  # -o
    check_file: str | None  # --check
    committed: str | None  # the --check file's text, read before the work
    as_json: bool

    @property
    def shows_step(self) -> bool:
        """Whether the training step is predicted: for --json and the report, not for --check or a config on
        stdout."""
        return self.check_file is None and (
            self.as_json or self.config_format is None or self.output is not None
        )


def _destination(
    request: SuggestRequest,
    fmt: str | None,
    output: str | None,
    check_file: str | None,
    *,
    as_json: bool,
    force: bool,
    current: str | None = None,
) -> _Destination:
    """-o, --check and --format, checked before the work: a recipe the format's framework lacks, a path that
    cannot be written, a file not ours to replace or a --check file that cannot be read fails at once."""
    if output is not None and check_file is not None:
        raise AdvisorError(
            "-o and --check do not go together", hint="write with -o, verify in CI with --check"
        )
    config_format = _format_for(fmt, output or check_file)
    # a format that cannot convert this model as it says
    check_format_target(
        config_format, request.target, None if request.recipe == AUTO else parse_recipe(request.recipe)
    )
    if config_format is not None and request.recipe != AUTO:
        # a recipe its framework lacks: say so now
        check_format_recipe(config_format, parse_recipe(request.recipe))
    if config_format in _NO_FLOAT8_ALL_GATHER and request.float8_all_gather:
        raise AdvisorError(
            f"--float8-all-gather: {_NO_FLOAT8_ALL_GATHER[config_format]}",
            hint="drop --float8-all-gather, or write --format torchtitan-toml, nemo-automodel, accelerate, "
            "torchao (which set it up) or filter (whose header says to)",
        )
    if output is not None:
        inputs = _input_files(
            request.target, request.profile, request.grouped_profile, current, request.trace
        )
        guard_output(output, inputs=inputs, force=force)
    committed = read_committed(check_file) if check_file is not None else None
    return _Destination(config_format, output, check_file, committed, as_json)


def _advise(request: SuggestRequest, destination: _Destination, gpu: str | None):
    """Inspect the model, choose the profile and decide: (model layers, profile choice, advice, and the
    predictor it decided with: the profile's, with --trace's measured speedups where they apply; megatron
    decides a fused GEMM (qkv, gate+up) with it too)."""
    from fp8advisor.inspect.layers import inspect_model
    from fp8advisor.predict.selection import select_profile

    with err_console.status(f"inspecting {request.target} ..."):
        model_layers = inspect_model(request.target, batch=request.batch, seq=request.traced_seq)
    choice = select_profile(request.profile, grouped=request.grouped_profile, device_name=gpu)
    predictor = default_predictor(choice)
    if request.trace is not None:
        from fp8advisor.advice.trace_evidence import traced_predictor

        predictor = traced_predictor(request.trace, choice, predictor)
    allowed = _recipes_the_format_holds(destination.config_format, request.float8_all_gather)
    # --check regenerates exactly as the file's own command says: in-context results only when it names them
    automatic = request.measured is None and destination.check_file is None
    passed_over = list(choice.passed_over)  # files of the profile directory that could not be read
    in_context = _in_context_reader(
        request.measured, automatic, model_layers, choice, gpu, request.tensor_parallel, passed_over
    )
    with err_console.status("predicting ..."):
        advice = advise(
            model_layers,
            choice,
            request.recipe,
            request.min_speedup,
            tensor_parallel=request.tensor_parallel,
            auto_recipes=allowed,
            in_context=in_context,
            expert_imbalance=request.expert_imbalance,
            expert_parallel=request.expert_parallel,
            predictor=predictor,
        )
    warn_passed_over(passed_over)  # each once, whatever the number of scans that met it
    if request.trace is not None:
        from fp8advisor.advice.trace_evidence import traced_warnings

        for warning in traced_warnings(predictor, choice.primary.family):
            err_console.print(Text("warning: ", style="yellow") + Text(warning), soft_wrap=True)
    return model_layers, choice, advice, predictor


def _warn_about_format(advice: Advice, config_format: ConfigFormat | None) -> None:
    """What the format cannot say of the advice: on stderr, never in the file (a torchtitan config from other
    names)."""
    if config_format is not None:
        for warning in format_warnings(advice, config_format):
            err_console.print(Text("warning: ", style="yellow") + Text(warning), soft_wrap=True)


def _check_committed(advice: Advice, request: SuggestRequest, destination: _Destination, predictor) -> None:
    """--check: done when the committed file equals what would be written now; else its diff, the command
    that regenerates it, and exit 1."""
    check_file, config_format = destination.check_file, destination.config_format
    assert check_file is not None and config_format is not None
    expected = render(advice, config_format, request, output=check_file, predictor=predictor)
    ok, diff = check(check_file, expected, destination.committed)
    if ok:
        proof = _proof(advice, config_format)
        err_console.print(f"{check_file} is up to date ({config_format.value}, {proof})")
        return
    regenerate = pinned_command(request, advice, config_format, check_file)
    # Plain print (no Rich wrapping in a diff); the committed file's control characters shown as escapes
    print(plain(diff), end="")
    err_console.print(
        Text(f"{check_file} is stale: ", style="bold red") + Text(f"regenerate it with: {regenerate}")
    )
    raise typer.Exit(1)


def _proof(advice: Advice, config_format: ConfigFormat) -> str:
    """What --check says the file converts: the float8 exclusion list's simulation, or for MXFP8 the
    torchtitan-py inclusion list's (`emit.mx.what_it_converts`); torchao and megatron MX files name their
    layers and modules exactly (the MX formats never write a float8 exclusion list)."""
    if not advice.recipe.is_mx:
        return advice.proof_line()
    from fp8advisor.emit.mx import what_it_converts

    if config_format is ConfigFormat.TORCHTITAN_PY:
        return what_it_converts(advice)
    if config_format is ConfigFormat.TORCHAO:
        return f"MXFP8_LAYERS: exactly the {len(advice.convert_fqns)} advised Linear layers"
    return f"MXFP8 ({advice.recipe.value}): the Transformer Engine modules its header lists"


def _write_config(
    advice: Advice, request: SuggestRequest, destination: _Destination, predictor
) -> str | None:
    """The config's text (None without a format), written to -o; a note when in-context results found on
    their own decided it."""
    text = None
    if destination.config_format is not None:
        text = render(
            advice, destination.config_format, request, output=destination.output, predictor=predictor
        )
    if destination.output is not None:
        assert text is not None
        write(destination.output, text)
    if text is not None and advice.in_context is not None and advice.in_context.automatic:
        err_console.print(
            Text("note: ", style="yellow")
            + Text(
                f"in-context results found in {advice.in_context.source} decided "
                f"{len(advice.profile_decisions)} layers; the config's check command names that directory "
                "with --measured: for CI, commit a copy of it and give --measured its path"
            ),
            soft_wrap=True,
        )
    return text


def _print_advice(
    advice: Advice, destination: _Destination, predictor, text: str | None, step, current_step=None
) -> None:
    """The advice for people: one JSON document (--json), the config on stdout with a brief on stderr, or the
    report; with --current, the current config's step beside the advice's."""
    config_format, output = destination.config_format, destination.output
    if destination.as_json:
        document = {**advice.to_json(), "step": None if step is None else step.to_json()}
        if advice.recipe.is_mx:  # an exclusion list would mean the opposite in torchtitan's MX converter
            from fp8advisor.emit.mx import inclusion_list

            document.update(filter_fqns=None, mx_fqns=list(inclusion_list(advice).entries))
        if current_step is not None:
            document["current"] = current_step.to_json()
        print_document(document)  # plain text, valid JSON (non-finite figures as null)
        return
    if config_format is not None and output is None:
        # stdout holds the config alone, ready to pipe; the people's part goes to stderr
        print(text, end="")
        print_brief(
            advice,
            what_the_file_does(advice, config_format, predictor),
            leaves_fp8_off(advice, config_format, predictor),
        )
        print_current_brief(current_step)
        return
    print_report(advice, leaves_fp8_off(advice, config_format, predictor))
    print_in_context(advice)
    print_step(step, advice)
    if current_step is not None:
        print_current(current_step)
    if output is not None:
        console.print(f"wrote {output} ({config_format.value})")


#: The formats whose file cannot set up FSDP float8 all-gather, which `--float8-all-gather` predicts: why.
_NO_FLOAT8_ALL_GATHER = {
    ConfigFormat.TORCHTITAN_PY: "it needs the tensorwise recipe, which torchtitan 0.3 does not have",
    ConfigFormat.MEGATRON: "the precision config cannot set it (Megatron's own --fp8-param-gather is another "
    "mechanism, with Transformer Engine's kernels), so the step it predicts would not run",
}


def _recipes_the_format_holds(
    config_format: ConfigFormat | None, float8_all_gather: bool = False
) -> tuple[Recipe, ...]:
    """What "auto" chooses among: the recipes the format's file can hold (`emit.config_file.
    check_format_recipe`: torchtitan 0.3 has no tensorwise, Transformer Engine tensorwise and mxfp8_rceil,
    MXFP8 only in torchtitan-py, torchao and megatron: `emit.mx`), and FSDP's float8 all-gather
    (--float8-all-gather) exists for tensorwise alone (torchao's Float8LinearConfig refuses it with the
    rowwise recipes), so the file written and the step predicted are both tensorwise."""
    from fp8advisor.emit.config_file import check_format_recipe

    if float8_all_gather:  # formats that cannot set it up are refused in `_destination`
        return (Recipe.TENSORWISE,)
    if config_format is None:
        return ALL_RECIPES
    held = []
    for recipe in ALL_RECIPES:
        try:
            check_format_recipe(config_format, recipe)
        except ConfigError:
            continue
        held.append(recipe)
    return tuple(held)


def _in_context_reader(
    measured: str | None,
    automatic: bool,
    model_layers,
    choice,
    gpu: str | None,
    tensor_parallel: int,
    passed_over: list[str],
):
    """`advice.in_context.in_context_reader` for the GPU family of --gpu, else of the profile."""
    from fp8advisor.advice.in_context import in_context_reader
    from fp8advisor.gpus import gpu_family

    family = gpu_family(gpu) if gpu is not None else choice.primary.family
    return in_context_reader(
        measured,
        automatic=automatic,
        model_layers=model_layers,
        family=family,
        tensor_parallel=tensor_parallel,
        passed_over=passed_over,
    )


def _step_gpu(choice, gpu: str | None):
    """The `StepGpu` of the step model: --gpu, else the GPU of the profile."""
    from fp8advisor.advice.step import StepGpu
    from fp8advisor.predict.speedup import roofline_specs_for

    return StepGpu.of(get_specs(gpu) if gpu is not None else roofline_specs_for(choice.primary))


def _why_no_step(advice: Advice, model_layers) -> str | None:
    """Why the step model does not cover this set-up (None: it does)."""
    if getattr(model_layers, "census", None) is None:
        return "not predicted: the model was inspected without an op census"
    return None


def _step_report(advice: Advice, model_layers, choice, gpu: str | None, config):
    """The step model for the advice, or None without an op census (a model inspected by other means)."""
    from fp8advisor.advice.step_comparison import step_report

    if _why_no_step(advice, model_layers) is not None:
        return None
    return step_report(advice, model_layers, choice, _step_gpu(choice, gpu), config)


def _read_current(current: str | None):
    """--current, read before the work (`verification.current.read_current`: one ConfigError for a file that
    cannot be used); None without it."""
    if current is None:
        return None
    from fp8advisor.verification.current import read_current

    return read_current(current)


def _current_step(current_file, request: SuggestRequest, advice: Advice, model_layers, choice, gpu, step):
    """The --current config's float8 layers and predicted step beside the advice's (`step`: its report)."""
    from fp8advisor.verification.current import current_conversion, predict_current

    with err_console.status(f"reading {current_file.path} as its framework would ..."):
        current = current_conversion(current_file, request.target, advice)
        return predict_current(
            current,
            advice,
            model_layers,
            step,
            _step_gpu(choice, gpu),
            choice,
            why_not=_why_no_step(advice, model_layers),
        )
