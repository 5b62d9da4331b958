"""The cases of benchmarks/fuzz.py, by the classes of issue 25. Each says what it plants in its folder, the
command(s) it runs, and what it expects (`ok|refuse`: accepting the input, escaped, or refusing it are both
right; anything else is a finding). See fuzz.py for the counts."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable

from fuzz_support import (
    TINY_FQNS,
    Case,
    Context,
    Interrupt,
    Step,
    copy_repo_file,
    forbid_new_files,
    readable_by_suggest,
    tiny_source,
)

CLASSES = {
    1: ("raw text", "untrusted text reaches a generated file or the terminal raw"),
    2: ("markup", "rich markup in user strings"),
    3: ("false success", "verify and --check report success that is not"),
    4: ("files replaced", "a user's file is replaced"),
    5: ("one bad file", "one bad file breaks everything"),
    6: ("unbounded", "unbounded work from small input"),
    7: ("ctrl-c", "Ctrl-C is lost"),
    8: ("odd values", "tracebacks from odd but legal values"),
    9: ("looks successful", "outputs that look successful and are not"),
    10: ("small", "small but real"),
}

CASES: list[Case] = []
H100 = "NVIDIA H100 80GB HBM3"
SUGGEST = ["suggest", "tiny.py", "--seq", "64"]
FAST = ["--profile", "fast.json"]
KIND = {
    "torchao": "py",
    "accelerate": "py",
    "torchtitan-py": "py",
    "torchtitan-toml": "toml",
    "nemo-automodel": "yaml",
    "filter": "filter",
    "megatron": "yaml",
}
SUFFIX = {
    "torchao": "py",
    "accelerate": "py",
    "torchtitan-py": "py",
    "torchtitan-toml": "toml",
    "nemo-automodel": "yaml",
    "filter": "txt",
    "megatron": "yaml",
}
H100_RESULTS = "tests/fixtures/fit/run-20261122T100000Z-h100aaaa.jsonl"
TINY_HF = "data/models/tiny_llama_hf/config.json"


def step(argv, expect: str = "ok", **options) -> Step:
    if isinstance(argv, str):
        argv = shlex.split(argv)
    return Step(argv=list(argv), expect=frozenset(expect.split("|")), **options)


def case(klass: int, name: str, steps, setup: Callable | None = None, *, slow: bool = False) -> None:
    assert all(c.isalnum() or c == "-" for c in name), name
    assert name not in {c.name for c in CASES}, name
    CASES.append(Case(name, klass, steps if isinstance(steps, list) else [steps], setup, slow))


def setups(*functions: Callable) -> Callable:
    def run(ctx: Context) -> None:
        for function in functions:
            function(ctx)

    return run


def with_tiny(ctx: Context) -> None:
    ctx.tiny()


def with_fast(ctx: Context) -> None:
    ctx.tiny()
    ctx.profile("fast.json")


def named_profile(name: str, rel: str = "p.json", **fields) -> Callable:
    """Setup: tiny.py and the fast profile at `rel` named `name` (placeholders replaced), and `fields`."""

    def setup(ctx: Context) -> None:
        ctx.tiny()

        def mutate(data):
            data["name"] = ctx.sub(name)
            data.update(fields)

        ctx.profile(rel, mutate)

    return setup


def mutated_profile(mutate: Callable[[dict], object], rel: str = "p.json", base: str = "fast") -> Callable:
    return lambda ctx: (ctx.tiny(), ctx.profile(rel, mutate, base=base))


def suggest_to(
    fmt: str,
    out: str | None = None,
    *,
    extra=(),
    expect="ok|refuse",
    target="tiny.py",
    fqns=TINY_FQNS,
    argv=None,
    **options,
) -> Step:
    """`suggest TARGET --seq 64 [extra] --format FMT -o OUT`, its output read as FMT's framework reads it."""
    out = out or f"fp8.{SUFFIX[fmt]}"
    base = argv if argv is not None else ["suggest", target, "--seq", "64"]
    return step(
        [*base, *extra, "--format", fmt, "-o", out],
        expect,
        outputs=(out,),
        generated=((out, "json" if out.endswith(".json") else KIND[fmt]),),
        target=target,
        fqns=fqns,
        **options,
    )


# --- hostile text -------------------------------------------------------------------------------------------

#: Layer names (ModuleDict keys: any string without a dot) that mean something in a file's syntax.
PRINTABLE_NAMES = [
    'q"',
    "s'",
    "b\\",
    'y"""',
    "u'''",
    "null",
    "true",
    "0x1F",
    "1e3",
    "~",
    "- a",
    "a: b",
    "a #b",
    "*a",
    "&a b",
    "!!binary",
    "|",
    "? a",
    "[a",
    "{a",
    "%x",
    "@x",
    "`x",
    "\u00fc",
    "$(x)",
    "a]]",
    'a",b',
]
#: Layer names that hold a line break of some syntax (the first: a Python payload after a newline).
BREAK_NAMES = ["a\rb", "a\u2028b", "a\x85b", "a\x0bb", "a\x0cb"]
CONTROL_NAMES = ["\x1b[31mred\x1b[0m", "\x9b2J", "\x1b]8;;http://x\x1b\\l", "a\x07", "n\x00l"]


def evil(names: list[str], *, called: bool = True, payload: bool = False) -> tuple[Callable, tuple[str, ...]]:
    """(setup, fqns): evil.py, whose ModuleDict `units` is keyed by `names` (plus, with `payload`, a name
    holding a newline, Python that creates the canary, a newline and `#`) and "plain". called: the named
    units run (and convert with the fast profile) and "plain" does not; else the reverse (the named units
    stay in bf16, and a filter list must name them)."""
    keys = list(names) + (['x"\n@PY@\n#'] if payload else [])

    def setup(ctx: Context) -> None:
        real = [ctx.sub(key) for key in keys]
        order = real if called else ["plain"]
        source = (
            tiny_source()
            .replace(
                "        self.blocks = nn.ModuleList([Block(), Block()])",
                f"        self.units = nn.ModuleDict({{key: Block() for key in {[*real, 'plain']!r}}})\n"
                f"        self.order = {order!r}",
            )
            .replace(
                "        for block in self.blocks:\n",
                "        for key in self.order:\n            block = self.units[key]\n",
            )
        )
        ctx.write("evil.py", source)
        ctx.profile("fast.json")

    fqns = tuple(f"units.{key}.{n}" for key in [*keys, "plain"] for n in ("up", "down", "gate", "spare"))
    return setup, (*fqns, "head")


def evil_case(
    klass: int, name: str, fmt: str, names: list[str], *, out: str | None = None, **options
) -> None:
    setup, fqns = evil(names, **options)
    case(klass, name, suggest_to(fmt, out, target="evil.py", fqns=fqns, extra=FAST), setup)


# --- class 1: untrusted text reaches a generated file or the terminal raw ----------------------------------

PY_NAME = "x\n@PY@\n#"


def _class_1() -> None:
    profile = ["--profile", "p.json"]
    for fmt in ("torchao", "accelerate", "torchtitan-py"):
        case(1, f"profile-name-newline-{fmt}", suggest_to(fmt, extra=profile), named_profile(PY_NAME))
    case(
        1,
        "profile-name-newline-toml",
        suggest_to("torchtitan-toml", extra=profile),
        named_profile('x\n[model]\nconverters = []\n"a" = "b"\n#'),
    )
    case(
        1,
        "profile-name-newline-yaml",
        suggest_to("nemo-automodel", extra=profile),
        named_profile("x\nfp8:\n  enabled: false\n#"),
    )
    case(
        1,
        "profile-name-quote-filter-json",
        suggest_to("filter", "f.json", extra=profile),
        named_profile('x", "filter_fqns": ["blocks"], "z": "'),
    )
    case(1, "profile-name-cr-torchao", suggest_to("torchao", extra=profile), named_profile("x\r@PY@\r#"))
    case(
        1,
        "profile-name-u2028-yaml",
        suggest_to("nemo-automodel", extra=profile),
        named_profile("x\u2028fp8: {enabled: false}\u2028#"),
    )

    def llama(ctx: Context) -> None:
        path = copy_repo_file(ctx, "data/models/llama3.py", "llama.py")
        path.write_text(path.read_text() + "\n\ndef build_model():\n    return llama3_8b(n_layers=2)\n")

    case(
        1,
        "profile-name-newline-megatron",
        suggest_to("megatron", target="llama.py", fqns=None, extra=profile),
        setups(named_profile("x\nenabled: false\n#"), llama),
    )
    case(
        1,
        "profile-name-newline-stdout",
        step(
            [*SUGGEST, *profile, "--format", "torchao"],
            "ok|refuse",
            generated=(("<stdout>", "py"),),
            target="tiny.py",
            fqns=TINY_FQNS,
        ),
        named_profile(PY_NAME),
    )
    case(
        1,
        "profile-dir-measured-picked",
        suggest_to("torchao", extra=["--gpu", "H100"]),
        named_profile(PY_NAME, rel="prof/evil.json", provenance="measured"),
    )
    case(
        1,
        "profile-ansi-fields-terminal",
        step([*SUGGEST, *profile], "ok|refuse"),
        named_profile("\x1b[31mred\x1b[0m", source="\x1b]0;title\x07src", method="\x1b[2Jm"),
    )
    for label, value in (
        ("newline", "H100 x\n@PY@\n#"),
        ("ansi", "H100 \x1b[31mred\x1b[0m"),
        ("markup", "H100 [/x] w[red]"),
    ):
        for fmt in ("torchao", "nemo-automodel") if label == "newline" else ("torchao",):

            def device(ctx, value=value):
                ctx.tiny()
                ctx.profile(
                    "p.json",
                    lambda d: (
                        d["device"].update(name=ctx.sub(value)),
                        d.update(source=ctx.sub(value), method=ctx.sub(value)),
                    ),
                )

            case(
                1,
                f"profile-device-name-{label}-{fmt}",
                suggest_to(fmt, extra=profile, contains=("w[red]",) if label == "markup" else ()),
                device,
            )
    case(1, "profile-c1-csi-terminal", step([*SUGGEST, *profile], "ok|refuse"), named_profile("\x9b31mred"))

    # layer names: the model's own strings, in every format
    evil_case(1, "layer-names-printable-torchao", "torchao", PRINTABLE_NAMES)
    evil_case(1, "layer-names-printable-accelerate", "accelerate", PRINTABLE_NAMES)
    for fmt in ("torchtitan-toml", "nemo-automodel", "filter", "torchtitan-py"):
        evil_case(1, f"layer-names-printable-{fmt}", fmt, PRINTABLE_NAMES, called=False)
    evil_case(1, "layer-names-printable-filter-json", "filter", PRINTABLE_NAMES, out="f.json", called=False)
    evil_case(1, "layer-names-payload-torchao", "torchao", [], payload=True)
    evil_case(1, "layer-names-payload-toml", "torchtitan-toml", [], called=False, payload=True)
    evil_case(1, "layer-names-breaks-torchao", "torchao", BREAK_NAMES)
    for fmt in ("torchtitan-toml", "nemo-automodel"):
        evil_case(1, f"layer-names-breaks-{fmt}", fmt, BREAK_NAMES, called=False)
    setup, fqns = evil(
        [], payload=True
    )  # the default profile: nothing converts, the header names the best layer
    case(
        1,
        "layer-names-payload-fp8-off-header",
        suggest_to("torchtitan-toml", target="evil.py", fqns=fqns),
        setup,
    )
    setup, fqns = evil(CONTROL_NAMES)
    case(1, "layer-names-control-layers", step("layers evil.py --seq 64", "ok|refuse"), setup)
    case(
        1,
        "layer-names-control-suggest",
        step("suggest evil.py --seq 64 --profile fast.json", "ok|refuse"),
        setup,
    )
    evil_case(1, "layer-names-control-torchao", "torchao", CONTROL_NAMES)

    # paths, targets and the environment
    def model_named(name: str) -> Callable:
        return lambda ctx: (ctx.tiny(ctx.sub(name)), ctx.profile("fast.json"))

    for fmt, name in (
        ("torchao", "m\n@PY@\n#.py"),
        ("torchtitan-toml", 'm\n[model]\n"a" = 1\n#.py'),
        ("nemo-automodel", "m\nfp8:\n  enabled: false\n#.py"),
    ):
        case(1, f"model-path-newline-{fmt}", suggest_to(fmt, target=name, extra=FAST), model_named(name))
    for label, name in (
        ("shell-substitution", "$(touch CANARY).py"),
        ("semicolon", "m;touch CANARY;x.py"),
    ):
        case(
            1,
            f"model-path-{label}",
            suggest_to("torchtitan-toml", target=name, extra=FAST),
            model_named(name),
        )
    target = "tiny.py:build_model(tag='''x\n@PY@\n#''')"
    case(
        1,
        "target-args-newline-torchao",
        suggest_to("torchao", target=target, extra=FAST),
        lambda ctx: (ctx.write("tiny.py", tiny_source(args="tag=''")), ctx.profile("fast.json")),
    )
    path = "p\n@PY@\n#.json"
    case(
        1,
        "profile-path-newline-torchao",
        suggest_to("torchao", extra=["--profile", path]),
        lambda ctx: (ctx.tiny(), ctx.profile(ctx.sub(path))),
    )
    case(
        1,
        "env-profile-dir-newline",
        suggest_to("torchao", extra=["--gpu", "H100"], env={"FP8ADVISOR_PROFILE_DIR": "@WORK@/pd\n@PY@\n#"}),
        lambda ctx: (ctx.tiny(), ctx.in_context(ctx.sub("pd\n@PY@\n#") + "/in-context")),
    )
    case(
        1,
        "measured-path-newline",
        suggest_to("torchtitan-toml", extra=["--gpu", "H100", "--measured", "ctx\n[model]\n#"]),
        lambda ctx: (ctx.tiny(), ctx.in_context("ctx\n[model]\n#")),
    )
    case(
        1,
        "results-device-ansi",
        step([*SUGGEST, "--gpu", "H100"], "ok|refuse"),
        lambda ctx: (ctx.tiny(), ctx.in_context(mutate=_device_name("NVIDIA H100 \x1b[31mred\x1b[0m"))),
    )

    def fit_device(ctx: Context) -> None:
        ctx.tiny()
        records = [json.loads(line) for line in (_repo() / H100_RESULTS).read_text().splitlines()]
        records[0]["device"]["name"] = ctx.sub("NVIDIA H100 \x1b[31m\n@PY@\n#")
        ctx.write("run.jsonl", "".join(json.dumps(r) + "\n" for r in records))

    case(
        1,
        "fit-device-newline-chain",
        [
            step("fit run.jsonl -o p.json", "ok|refuse", outputs=("p.json",)),
            suggest_to("torchao", extra=profile, after_ok=True),
        ],
        fit_device,
    )
    case(
        1,
        "fit-name-newline-chain",
        [
            step(
                ["fit", "fast.csv", "--device", H100, "--name", PY_NAME, "-o", "p.json"],
                "ok|refuse",
                outputs=("p.json",),
            ),
            suggest_to("torchao", extra=profile, after_ok=True),
        ],
        lambda ctx: (ctx.tiny(), _fast_csv(ctx)),
    )
    case(
        1,
        "error-message-ansi",
        step("layers tiny.py --seq 64", "refuse"),
        lambda ctx: ctx.tiny(build="raise ValueError('\\x1b[2J\\x1b[31mboom')"),
    )
    case(1, "error-path-ansi", step(["layers", "missing\x1b[31m.py"], "refuse"))
    case(1, "gpu-option-ansi", step([*SUGGEST, "--gpu", "\x1b[31mH100"], "refuse"), with_tiny)
    case(
        1,
        "config-entry-ansi-verify",
        _verify_c("c.toml", "fail|refuse"),
        lambda ctx: (with_fast(ctx), ctx.write("c.toml", _toml(["spare", "\x1b[31mred"]))),
        slow=True,
    )
    case(
        1,
        "hf-model-type-ansi",
        step("layers hf --seq 64", "refuse"),
        lambda ctx: ctx.write("hf/config.json", json.dumps({"model_type": "\x1b[31mllama\x1b[0m"})),
    )


def _device_name(name: str) -> Callable[[list[dict]], None]:
    def mutate(lines: list[dict]) -> None:
        lines[0]["device"]["name"] = name

    return mutate


def _repo():
    from fuzz_support import REPO

    return REPO


def _fast_csv(ctx: Context, rel: str = "fast.csv", extra_rows=()) -> None:
    ctx.write(rel, "recipe,M,K,N,speedup\n" + _csv_rows() + "".join(row + "\n" for row in extra_rows))


def _toml(entries: list[str], recipe: str = "rowwise", converters: str = '["quantize.linear.float8"]') -> str:
    listed = ", ".join(json.dumps(e) for e in entries)
    return (
        f'[model]\nconverters = {converters}\n\n[quantize.linear.float8]\nrecipe_name = "{recipe}"\n'
        f"filter_fqns = [{listed}]\n\n[compile]\nenable = true\n"
    )


def _yaml(body: str) -> str:
    return "compile:\n  enabled: true\n" + body


# --- class 2: rich markup in user strings -------------------------------------------------------------------


def _class_2() -> None:
    for label, name in (
        ("close-tag", "[/x]"),
        ("style-tag", "w[red]"),
        ("link", "[link=file:///etc]l[/link]"),
    ):
        case(
            2,
            f"profile-name-markup-{label}",
            step([*SUGGEST, "--profile", "p.json"], "ok|refuse", contains=(name,)),
            named_profile(name),
        )
    case(
        2,
        "model-path-markup",
        step(["suggest", "[/x].py", "--seq", "64"], "ok|refuse", contains=("[/x].py",)),
        lambda ctx: ctx.tiny("[/x].py"),
    )
    case(
        2,
        "model-path-style-markup",
        step(["suggest", "w[red].py", "--seq", "64"], "ok|refuse", contains=("w[red].py",)),
        lambda ctx: ctx.tiny("w[red].py"),
    )
    case(
        2,
        "layer-names-markup-layers",
        step("layers evil.py --seq 64", "ok|refuse", contains=("[/x]", "w[red]")),
        evil(["[/x]", "w[red]", "[bold]b"])[0],
    )
    case(
        2,
        "layer-names-markup-json",
        step("suggest evil.py --seq 64 --profile fast.json --json", "ok|refuse"),
        evil(["[/x]", "w[red]"], called=False)[0],
    )
    case(
        2,
        "layer-names-markup-table",
        step("suggest evil.py --seq 64 --profile fast.json", "ok|refuse", contains=("w[red]",)),
        evil(["[/x]", "w[red]"], called=False)[0],
    )
    evil_case(2, "layer-names-markup-toml", "torchtitan-toml", ["[/x]", "w[red]"], called=False)
    case(
        2,
        "output-path-markup",
        suggest_to("torchtitan-toml", "[/x].toml", contains=("[/x].toml",)),
        with_tiny,
    )
    case(
        2, "output-path-style-markup", suggest_to("torchao", "w[red].py", contains=("w[red].py",)), with_tiny
    )
    case(
        2,
        "check-path-markup",
        step([*SUGGEST, *FAST, "--format", "torchtitan-toml", "--check", "[/x].toml"], "ok"),
        lambda ctx: ctx.committed("torchtitan-toml", "[/x].toml"),
    )
    case(
        2,
        "stale-check-path-markup",
        step(
            [*SUGGEST, *FAST, "--format", "torchtitan-toml", "--check", "[/x].toml"],
            "fail",
            contains=("[/x].toml",),
        ),
        lambda ctx: ctx.write("[/x].toml", ctx.committed("torchtitan-toml", "c.toml").read_text() + "\n"),
    )
    case(
        2,
        "fit-name-markup",
        step(
            ["fit", "fast.csv", "--device", H100, "--name", "[/x]", "-o", "p.json"],
            "ok|refuse",
            contains=("[/x]",),
            outputs=("p.json",),
        ),
        _fast_csv,
    )
    case(
        2,
        "fit-results-path-markup",
        step(["fit", "[/x]run.jsonl", "-o", "p.json"], "ok", outputs=("p.json",)),
        lambda ctx: copy_repo_file(ctx, H100_RESULTS, "[/x]run.jsonl"),
    )
    case(
        2,
        "bench-out-markup",
        step(
            [
                "bench",
                "--emulate",
                "--M",
                "64",
                "--K",
                "32",
                "--N",
                "32",
                "--recipes",
                "rowwise",
                "--no-png",
                "--compile-workers",
                "0",
                "--out",
                "[/x]res",
            ],
            "ok",
            outputs=("[/x]res/**",),
            timeout=120,
        ),
        slow=True,
    )
    case(
        2, "missing-model-markup", step(["layers", "[/x]missing.py"], "refuse", contains=("[/x]missing.py",))
    )
    case(
        2,
        "missing-config-markup",
        step(["verify", "tiny.py", "--config", "[/red].toml"], "refuse", contains=("[/red].toml",)),
        with_tiny,
    )
    case(2, "gpu-option-markup", step([*SUGGEST, "--gpu", "[/x]"], "refuse", contains=("[/x]",)), with_tiny)
    case(
        2,
        "error-message-markup",
        step("layers tiny.py --seq 64", "refuse", contains=("[/x] w[red]",)),
        lambda ctx: ctx.tiny(build="raise ValueError('[/x] w[red]')"),
    )

    case(
        2,
        "results-device-markup",
        step([*SUGGEST, "--gpu", "H100"], "ok|refuse"),
        lambda ctx: (ctx.tiny(), ctx.in_context(mutate=_device_name("NVIDIA H100 [/x]"))),
    )
    case(
        2,
        "config-entry-markup-verify",
        step(
            ["verify", "tiny.py", "--seq", "64", "--profile", "fast.json", "--config", "c.toml"],
            "fail|refuse",
            contains=("w[red]",),
        ),
        lambda ctx: (with_fast(ctx), ctx.write("c.toml", _toml(["spare", "[/x]", "w[red]"]))),
        slow=True,
    )


# --- class 3: false success ---------------------------------------------------------------------------------


def _committed_plus(fmt: str, rel: str, append: str = "", replace: tuple[str, str] | None = None) -> Callable:
    def setup(ctx: Context) -> None:
        path = ctx.committed(fmt, rel)
        text = path.read_text()
        if replace is not None:
            assert replace[0] in text, (fmt, replace[0])
            text = text.replace(*replace)
        path.write_text(text + append)

    return setup


def _verify(config: str, expect: str = "fail|refuse", **options) -> Step:
    return step(["verify", "tiny.py", "--config", config], expect, timeout=90, **options)


def _class_3() -> None:
    rebinds = {
        "filter-lambda": "\nmodule_filter_fn = lambda module, fqn: False\n",
        "filter-second-def": "\n\ndef module_filter_fn(module, fqn):\n    return False\n",
        "layers-emptied": "\nFLOAT8_LAYERS = frozenset()\n",
        "layers-minus-one": '\nFLOAT8_LAYERS = FLOAT8_LAYERS - {"blocks.0.up"}\n',
        "layers-augmented": '\nFLOAT8_LAYERS |= {"blocks.0.spare"}\n',
        "globals-assignment": '\nglobals()["module_filter_fn"] = lambda module, fqn: False\n',
        "conditional": "\nif True:\n    module_filter_fn = lambda module, fqn: False\n",
        "for-target": "\nfor module_filter_fn in [lambda module, fqn: False]:\n    pass\n",
        "convert-rebound": "\n\ndef convert_model(model):\n    return model\n",
        "converter-rebound": "\nconvert_to_float8_training = lambda *args, **kwargs: None\n",
        "import-shadow": "\nfrom os.path import isdir as module_filter_fn\n",
    }
    for label, append in rebinds.items():
        case(
            3,
            f"verify-torchao-{label}",
            _verify("fp8.py"),
            _committed_plus("torchao", "fp8.py", append),
            slow=True,
        )
    case(
        3,
        "verify-accelerate-filter-rebound",
        _verify("fp8.py"),
        _committed_plus("accelerate", "fp8.py", "\nmodule_filter_func = lambda module, fqn: False\n"),
        slow=True,
    )
    case(
        3,
        "verify-toml-converters-empty",
        _verify("fp8.toml"),
        _committed_plus(
            "torchtitan-toml",
            "fp8.toml",
            replace=('converters = ["quantize.linear.float8"]', "converters = []"),
        ),
        slow=True,
    )
    case(
        3,
        "verify-toml-empty-entry",
        _verify("fp8.toml"),
        _committed_plus("torchtitan-toml", "fp8.toml", replace=('"spare",', '"spare", "",')),
        slow=True,
    )
    case(
        3,
        "verify-yaml-duplicate-key",
        _verify("fp8.yaml"),
        _committed_plus("nemo-automodel", "fp8.yaml", "fp8:\n  enabled: false\n"),
        slow=True,
    )
    case(
        3,
        "verify-filter-json-empty-entry",
        _verify_c("f.json", "fail|refuse"),
        lambda ctx: (with_fast(ctx), ctx.write("f.json", '["spare", ""]\n')),
        slow=True,
    )

    stale = ('recipe_name = "tensorwise"', 'recipe_name = "rowwise"')
    check = [*SUGGEST, *FAST, "--format", "torchtitan-toml", "--check", "fp8.toml"]
    endings = {
        "atexit-os-exit": "import atexit, os\natexit.register(lambda: os._exit(0))\n",
        "atexit-sys-exit": "import atexit, sys\natexit.register(sys.exit, 0)\n",
        "sys-exit-replaced": "import os, sys\nsys.exit = lambda *args: os._exit(0)\n",
        # a thread that outlives the main thread and ends the process with 0 while the interpreter shuts down
        "shutdown-thread": "import os, threading, time\n\n\ndef _end():\n"
        "    while threading.main_thread().is_alive():\n        time.sleep(0.01)\n    os._exit(0)\n\n\n"
        "threading.Thread(target=_end).start()\n",
        "stdout-closed": "import os, sys\nsys.stdout = open(os.devnull, 'w')\n",
        "excepthook": "import os, sys\nsys.excepthook = lambda *args: os._exit(0)\n",
    }
    for label, prelude in endings.items():
        case(
            3,
            f"stale-check-{label}",
            step(check, "fail|refuse"),
            setups(
                _committed_plus("torchtitan-toml", "fp8.toml", replace=stale),
                lambda ctx, prelude=prelude: ctx.tiny(prelude=prelude),
            ),
        )
    for label in ("atexit-os-exit", "shutdown-thread"):
        case(
            3,
            f"failing-verify-{label}",
            _verify("fp8.toml"),
            setups(
                _committed_plus("torchtitan-toml", "fp8.toml", replace=('"spare",', '"blocks",')),
                lambda ctx, p=endings[label]: ctx.tiny(prelude=p),
            ),
            slow=True,
        )
    case(
        3,
        "stale-check-trailing-newline",
        step(check, "fail"),
        _committed_plus("torchtitan-toml", "fp8.toml", "\n"),
    )
    case(
        3,
        "stale-check-other-min-speedup",
        step([*check, "--min-speedup", "3"], "fail"),
        _committed_plus("torchtitan-toml", "fp8.toml"),
    )


# --- class 4: a user's file is replaced ---------------------------------------------------------------------

HAND_WRITTEN = "# my training settings\n[training]\nsteps = 1000\n"


def _class_4() -> None:
    chdir = "import os\nos.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'elsewhere'))\n"

    def chdir_model(ctx: Context) -> None:
        ctx.tiny(prelude=chdir)
        ctx.profile("fast.json")
        ctx.profile("elsewhere/fast.json")
        ctx.write("elsewhere/fp8.toml", HAND_WRITTEN)

    case(4, "chdir-model-relative-output", suggest_to("torchtitan-toml", extra=FAST), chdir_model)
    case(
        4,
        "chdir-model-relative-check",
        step([*SUGGEST, *FAST, "--format", "torchtitan-toml", "--check", "fp8.toml"], "ok"),
        setups(chdir_model, lambda ctx: ctx.write("fp8.toml", ctx.fixtures.committed("torchtitan-toml"))),
    )
    case(
        4,
        "chdir-model-relative-config",
        _verify("fp8.toml", "ok"),
        setups(chdir_model, lambda ctx: ctx.write("fp8.toml", ctx.fixtures.committed("torchtitan-toml"))),
        slow=True,
    )
    case(
        4,
        "chdir-model-relative-bench-out",
        step(
            "bench --model tiny.py --emulate --seq 64 --profile fast.json --out res",
            "ok|refuse",
            outputs=("res/**",),
            timeout=180,
        ),
        setups(chdir_model, lambda ctx: ctx.write("elsewhere/res/notes.txt", "mine\n")),
        slow=True,
    )

    not_ours = {
        "json-list": ("mine.json", '["keep", "me"]\n'),
        "mark-in-line-2": (
            "notes.toml",
            "# my settings\n# Generated by fp8advisor, then edited by hand\n[training]\nsteps = 10\n",
        ),
        "mark-not-exact": ("notes.toml", "# Not Generated by fp8advisor: mine\n[training]\nsteps = 10\n"),
        "mark-in-value": ("notes.yaml", "note: Generated by fp8advisor\nsteps: 10\n"),
        "mark-in-json": ("mine.json", '{"generated_by": "Generated by fp8advisor", "mine": true}\n'),
    }
    for label, (rel, text) in not_ours.items():
        fmt = (
            "filter"
            if rel.endswith(".json")
            else "torchtitan-toml"
            if rel.endswith(".toml")
            else "nemo-automodel"
        )
        case(
            4,
            f"not-ours-{label}",
            step([*SUGGEST, "--format", fmt, "-o", rel], "refuse"),
            lambda ctx, rel=rel, text=text: (ctx.tiny(), ctx.write(rel, text)),
        )

    def in_prof(ctx):
        ctx.tiny()
        ctx.profile("prof/fast.json")

    case(
        4,
        "force-over-profile-by-name",
        step(
            [*SUGGEST, "--profile", "fast", "--format", "filter", "-o", "prof/fast.json", "--force"], "refuse"
        ),
        in_prof,
    )
    case(
        4,
        "force-over-profile-symlink",
        step([*SUGGEST, *FAST, "--format", "filter", "-o", "link.json", "--force"], "refuse"),
        lambda ctx: (with_fast(ctx), ctx.symlink("link.json", "fast.json")),
    )
    case(
        4,
        "force-over-measured-results",
        step(
            [
                *SUGGEST,
                "--gpu",
                "H100",
                "--measured",
                "ctx",
                "--format",
                "filter",
                "-o",
                "ctx/run-20261126T000000Z-fuzz0001.jsonl",
                "--force",
            ],
            "refuse",
        ),
        lambda ctx: (ctx.tiny(), ctx.in_context("ctx")),
    )
    case(
        4,
        "force-over-imported-module",
        step([*SUGGEST, "--format", "torchao", "-o", "helper.py", "--force"], "refuse"),
        lambda ctx: (
            ctx.write("helper.py", "WIDTH = 64\n"),
            ctx.tiny(
                prelude="import os, sys\nsys.path.insert(0, os.path.dirname(__file__))\nimport helper\n"
            ),
        ),
    )
    case(
        4,
        "force-over-model-other-spelling",
        step([*SUGGEST, "--format", "torchao", "-o", "sub/../tiny.py", "--force"], "refuse"),
        lambda ctx: (ctx.tiny(), ctx.path("sub/x")),
    )
    case(
        4,
        "force-over-model-hardlink",
        step([*SUGGEST, "--format", "torchao", "-o", "alias.py", "--force"], "refuse"),
        lambda ctx: (ctx.tiny(), os.link(ctx.work / "tiny.py", ctx.work / "alias.py")),
    )
    case(
        4,
        "force-over-hf-config",
        step(
            ["suggest", "hf", "--seq", "64", "--format", "filter", "-o", "hf/config.json", "--force"],
            "refuse",
        ),
        lambda ctx: copy_repo_file(ctx, TINY_HF, "hf/config.json"),
    )
    case(
        4,
        "force-over-check-file",
        step(
            [
                *SUGGEST,
                *FAST,
                "--format",
                "torchtitan-toml",
                "--check",
                "fp8.toml",
                "-o",
                "fp8.toml",
                "--force",
            ],
            "ok|refuse|fail",
        ),
        lambda ctx: ctx.committed("torchtitan-toml", "fp8.toml"),
    )
    case(
        4,
        "output-symlink-to-user-file",
        step(
            [*SUGGEST, "--format", "torchtitan-toml", "-o", "link.toml"], "ok|refuse", outputs=("link.toml",)
        ),
        lambda ctx: (ctx.tiny(), ctx.write("notes.txt", HAND_WRITTEN), ctx.symlink("link.toml", "notes.txt")),
    )
    case(
        4,
        "fit-over-input-symlink",
        step(["fit", "fast.csv", "--device", H100, "-o", "link.csv"], "refuse"),
        lambda ctx: (_fast_csv(ctx), ctx.symlink("link.csv", "fast.csv")),
    )
    case(
        4,
        "fit-over-json-list",
        step(["fit", "fast.csv", "--device", H100, "-o", "mine.json"], "refuse"),
        lambda ctx: (_fast_csv(ctx), ctx.write("mine.json", '["a", "b"]\n')),
    )
    case(
        4,
        "fit-over-foreign-schema",
        step(["fit", "fast.csv", "--device", H100, "-o", "mine.json"], "refuse"),
        lambda ctx: (_fast_csv(ctx), ctx.write("mine.json", '{"schema": "my.tool/1", "data": [1]}\n')),
    )
    case(
        4,
        "fit-default-name-over-user-file",
        step(["fit", "fast.csv", "--device", H100, "--name", "fast"], "refuse"),
        lambda ctx: (_fast_csv(ctx), ctx.write("prof/fast.json", '{"my": "notes"}\n')),
    )
    case(
        4,
        "fit-over-results-in-dir",
        step(["fit", "res", "-o", "res/run-20261122T100000Z-h100aaaa.jsonl"], "refuse"),
        lambda ctx: copy_repo_file(ctx, H100_RESULTS, "res/run-20261122T100000Z-h100aaaa.jsonl"),
    )
    case(
        4,
        "bench-out-with-foreign-run-file",
        step(
            [
                "bench",
                "--emulate",
                "--M",
                "64",
                "--K",
                "32",
                "--N",
                "32",
                "--recipes",
                "rowwise",
                "--no-png",
                "--compile-workers",
                "0",
                "--out",
                "res",
            ],
            "ok|refuse",
            outputs=("res/**",),
            timeout=120,
        ),
        lambda ctx: ctx.write("res/run-20260101T000000Z-mine.jsonl", "my own notes, not results\n"),
        slow=True,
    )
    case(
        4,
        "verify-writes-nothing",
        _verify("fp8.toml", "ok"),
        lambda ctx: ctx.committed("torchtitan-toml", "fp8.toml"),
        slow=True,
    )


# --- class 5: one bad file breaks everything ----------------------------------------------------------------


def _choice(lines: list[dict]) -> dict:
    return next(line for line in lines if line.get("kind") == "block_choice")


def _set(path: str, value) -> Callable[[list[dict]], None]:
    """Mutate the forged in-context lines: `path` "choice.seeds.all.float8" or "header.model"."""

    def mutate(lines: list[dict]) -> None:
        first, *keys = path.split(".")
        record = lines[0] if first == "header" else _choice(lines)
        for key in keys[:-1]:
            record = record[key]
        record[keys[-1]] = value

    return mutate


#: Forged fields that `suggest` may never read (a record of another recipe, the search's trail, what the
#: bench resumes from, a measured profile without recipes): no traceback, but no warning required either.
UNREAD = {
    "choice-recipe-bogus",
    "choice-search-number",
    "header-units-text",
    "header-seeds-from-list",
    "recipes-empty-measured",
}


def _class_5() -> None:
    bad_in_context = {
        "seeds-number": _set("choice.seeds", 5),
        "seeds-all-number": _set("choice.seeds.all", 5),
        "seeds-float8-number": _set("choice.seeds.all.float8", 5),
        "seeds-time-text": _set("choice.seeds.advice.wall_time_s", "fast"),
        "seeds-median-negative": _set("choice.seeds.all.wall_time_s.median", -1.0),
        "seeds-advice-null": _set("choice.seeds.advice", None),
        "choice-instances-null": _set("choice.instances", None),
        "choice-float8-ints": _set("choice.float8", [1, 2]),
        "choice-time-empty": _set("choice.wall_time_s", {}),
        "choice-recipe-bogus": _set("choice.recipe", "bogus"),
        "header-model-number": _set("header.model", 5),
        "header-units-text": _set("header.model.units", "x"),
        "torn-first-line": lambda lines: (
            b'{"kind": "run", "sch\n' + b"".join(json.dumps(line).encode() + b"\n" for line in lines[1:])
        ),
        "binary": lambda lines: bytes(range(256)) * 4,
        "json-list": lambda lines: b"[1, 2, 3]\n",
    }
    for label, mutate in bad_in_context.items():
        case(
            5,
            f"in-context-{label}",
            step([*SUGGEST, "--gpu", "H100"], "ok", contains_if_ok=() if label in UNREAD else ("fuzz0001",)),
            lambda ctx, m=mutate: (ctx.tiny(), ctx.in_context(mutate=m)),
        )
    case(
        5,
        "in-context-directory-named-run",
        step([*SUGGEST, "--gpu", "H100"], "ok"),
        lambda ctx: (ctx.tiny(), ctx.path("prof/in-context/run-20261126T000000Z-dir.jsonl/x")),
    )
    case(
        5,
        "measured-dir-one-bad-file",
        step([*SUGGEST, "--gpu", "H100", "--measured", "ctx"], "ok|refuse"),
        lambda ctx: (
            ctx.tiny(),
            ctx.in_context("ctx"),
            ctx.write("ctx/run-20261126T000001Z-bad00002.jsonl", b"\x00\x01garbage"),
        ),
    )
    bad_profiles = {
        "not-json": b"{not json",
        "json-list": b"[1, 2]",
        "family-list": lambda d: d["device"].__setitem__("family", ["H100"]),
        "points-text": lambda d: d["recipes"]["rowwise"].__setitem__("points", [{"M": "x"}]),
        "nan-speedups": lambda d: [
            p.__setitem__("speedup", float("nan")) for p in d["recipes"]["rowwise"]["points"]
        ],
        "empty": b"",
        "binary": bytes(range(256)),
        "recipes-empty-measured": lambda d: d.update(recipes={}, provenance="measured"),
        "device-null": lambda d: d.__setitem__("device", None),
    }
    for label, bad in bad_profiles.items():

        def setup(ctx, bad=bad):
            ctx.tiny()
            if isinstance(bad, bytes):
                ctx.write("prof/broken.json", bad)
            else:
                ctx.profile("prof/broken.json", lambda d: (d.__setitem__("provenance", "measured"), bad(d)))

        case(
            5,
            f"profile-dir-{label}",
            step(
                [*SUGGEST, "--gpu", "H100"], "ok", contains_if_ok=() if label in UNREAD else ("broken.json",)
            ),
            setup,
        )
    case(
        5,
        "profile-dir-directory",
        step([*SUGGEST, "--gpu", "H100"], "ok"),
        lambda ctx: (ctx.tiny(), ctx.path("prof/broken.json/x")),
    )
    case(
        5,
        "profile-dir-dangling-symlink",
        step([*SUGGEST, "--gpu", "H100"], "ok"),
        lambda ctx: (ctx.tiny(), ctx.symlink("prof/broken.json", "nowhere.json")),
    )
    case(
        5,
        "profile-dir-bad-and-explicit-good",
        step([*SUGGEST, *FAST], "ok"),
        lambda ctx: (with_fast(ctx), ctx.write("prof/broken.json", b"{")),
    )
    fit_bad = {
        "binary": bytes(range(256)),
        "json-list": b"[1, 2, 3]\n",
        "device-number": b'{"kind": "run", "schema": "fp8advisor.results/1", "run_id": "x", "device": 5}\n',
        "empty": b"",
    }
    for label, data in fit_bad.items():
        case(
            5,
            f"fit-dir-{label}",
            step("fit res -o p.json", "ok", outputs=("p.json",), contains_if_ok=("bad",)),
            lambda ctx, data=data: (
                copy_repo_file(ctx, H100_RESULTS, "res/run-20261122T100000Z-h100aaaa.jsonl"),
                ctx.write("res/run-20261122T110000Z-bad00001.jsonl", data),
            ),
        )
    case(
        5,
        "fit-explicit-bad-device",
        step("fit bad.jsonl -o p.json", "refuse"),
        lambda ctx: ctx.write(
            "bad.jsonl",
            b'{"kind": "run", "schema": "fp8advisor.results/1", "run_id": "x", '
            b'"device": [1], "software": 5}\n{"M": 1}\n',
        ),
    )


# --- class 6: unbounded work from small input ---------------------------------------------------------------

FILTER_HEAD = (
    "import torch\nfrom torchao.float8 import Float8LinearConfig, convert_to_float8_training\n\n"
    'FLOAT8_LAYERS = frozenset({"blocks.0.up", "blocks.0.down", "blocks.0.gate", "blocks.1.up", '
    '"blocks.1.down", "blocks.1.gate"})\n'
)
FILTER_TAIL = (
    "\n\ndef convert_model(model):\n    convert_to_float8_training(model, config=Float8LinearConfig"
    '.from_recipe_name("rowwise"), module_filter_fn=module_filter_fn)\n    return torch.compile(model)\n'
)


def _filter_config(body: str, head: str = "") -> Callable:
    """Setup: tiny.py, fast.json and c.py, a torchao config whose module_filter_fn has `body`."""

    def setup(ctx: Context) -> None:
        with_fast(ctx)
        indented = "\n".join("    " + line for line in body.splitlines())
        ctx.write(
            "c.py", FILTER_HEAD + head + "\n\ndef module_filter_fn(module, fqn):\n" + indented + FILTER_TAIL
        )

    return setup


def _verify_c(config: str = "c.py", expect: str = "refuse|fail", **options) -> Step:
    return step(
        ["verify", "tiny.py", "--seq", "64", "--profile", "fast.json", "--config", config],
        expect,
        timeout=90,
        **options,
    )


def _alias_bomb(where: str) -> str:
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 9) + "]")
    text = "\n".join(lines) + "\n"
    if where == "recipe":
        return text + "fp8:\n  enabled: true\n  recipe_name: *i\n  filter_fqns: [spare]\n"
    return text + "fp8:\n  enabled: true\n  recipe_name: rowwise\n  filter_fqns: *i\n"


def _class_6() -> None:
    bombs = {
        "string-doubling": "s = fqn\n" + "s = s + s\n" * 48 + "return fqn in FLOAT8_LAYERS and len(s) > 0",
        "number-squaring": 'n = 3\nfor c in "' + "x" * 40 + '":\n    n = n * n\nreturn fqn in FLOAT8_LAYERS',
        "nested-comprehension": "return fqn in FLOAT8_LAYERS and not any(a == b == c == d == e for a in S "
        "for b "
        "in S for c in S for d in S for e in S)",
        "nested-not": "return " + "not " * 990 + "(fqn not in FLOAT8_LAYERS)",
        "long-sum": "return fqn in FLOAT8_LAYERS or " + " + ".join(["0"] * 30000) + " > 1",
        "nested-loops": "for a in S:\n    for b in S:\n        for c in S:\n            for d in S:\n"
        "                pass\nreturn fqn in FLOAT8_LAYERS",
        "parens-deep": "return " + "(" * 300 + "fqn in FLOAT8_LAYERS" + ")" * 300,
    }
    head = 'S = "' + "abcdefghij" * 20 + '"\n'
    for label, body in bombs.items():
        case(6, f"filter-{label}", _verify_c(), _filter_config(body, head), slow=True)
    case(
        6,
        "yaml-alias-bomb-recipe",
        _verify_c("c.yaml"),
        lambda ctx: (with_fast(ctx), ctx.write("c.yaml", _alias_bomb("recipe"))),
        slow=True,
    )
    case(
        6,
        "yaml-alias-bomb-filter",
        _verify_c("c.yaml"),
        lambda ctx: (with_fast(ctx), ctx.write("c.yaml", _alias_bomb("filter"))),
        slow=True,
    )
    case(
        6,
        "yaml-alias-bomb-check",
        step([*SUGGEST, *FAST, "--format", "nemo-automodel", "--check", "c.yaml"], "fail|refuse"),
        lambda ctx: (with_fast(ctx), ctx.write("c.yaml", _alias_bomb("recipe"))),
    )
    bench = ["bench", "--emulate", "--no-png", "--compile-workers", "0", "--out", "res"]
    for label, shard in (("hundred-million", "1/100000000"), ("huge-numbers", "9" * 30 + "/" + "9" * 30)):
        case(
            6,
            f"bench-shard-{label}",
            step([*bench, "--shard", shard], "ok|refuse", outputs=("res/**",), timeout=90),
            slow=True,
        )
    sizes = ",".join(str(16 * i) for i in range(1, 3001))
    case(
        6,
        "bench-grid-explosion",
        step(
            [*bench, "--M", sizes, "--K", sizes, "--N", sizes], "ok|refuse", outputs=("res/**",), timeout=90
        ),
    )

    def fifo_setup(rel: str, with_model: bool = True) -> Callable:
        return lambda ctx: ((with_fast(ctx) if with_model else None), ctx.fifo(rel))

    fifos = {
        "config": (_verify_c("f.toml", "refuse"), "f.toml"),
        "check": (step([*SUGGEST, "--format", "torchtitan-toml", "--check", "f.toml"], "refuse"), "f.toml"),
        "model": (step("layers fifo.py --seq 64", "refuse"), "fifo.py"),
        "profile": (step([*SUGGEST, "--profile", "f.json"], "refuse"), "f.json"),
        "fit-input": (step("fit f.csv --device H100 -o p.json", "refuse"), "f.csv"),
        "hf-config": (step("layers hf --seq 64", "refuse"), "hf/config.json"),
        "output": (step([*SUGGEST, "--format", "torchtitan-toml", "-o", "f.toml"], "refuse"), "f.toml"),
        "in-profile-dir": (step([*SUGGEST, "--gpu", "H100"], "ok"), "prof/f.json"),
        "in-context-dir": (
            step([*SUGGEST, "--gpu", "H100"], "ok"),
            "prof/in-context/run-20260101T000000Z-f.jsonl",
        ),
        "in-fit-dir": (
            step("fit res -o p.json", "ok|refuse", outputs=("p.json",)),
            "res/run-20261122T110000Z-fifo0001.jsonl",
        ),
    }
    for label, (s, rel) in fifos.items():
        extra = (
            (lambda ctx: copy_repo_file(ctx, H100_RESULTS, "res/run-20261122T100000Z-h100aaaa.jsonl"))
            if label == "in-fit-dir"
            else (lambda ctx: None)
        )
        case(6, f"fifo-{label}", s, setups(fifo_setup(rel), extra), slow=label == "config")
    case(
        6,
        "fifo-in-bench-out",
        step(
            [*bench, "--M", "64", "--K", "32", "--N", "32", "--recipes", "rowwise"],
            "ok|refuse",
            outputs=("res/**",),
            timeout=120,
        ),
        lambda ctx: ctx.fifo("res/run-20260101T000000Z-fifo.jsonl"),
        slow=True,
    )
    devices = {
        "profile-dev-zero": (step([*SUGGEST, "--profile", "/dev/zero"], "refuse"), None),
        "config-dev-zero": (_verify_c("/dev/zero", "refuse"), None),
        "check-dev-zero": (step([*SUGGEST, "--format", "filter", "--check", "/dev/zero"], "refuse"), None),
        "fit-dev-zero": (step("fit /dev/zero --device H100 -o p.json", "refuse"), None),
        "model-symlink-dev-zero": (step("layers zero.py --seq 64", "refuse"), ("zero.py", "/dev/zero")),
        "config-symlink-urandom": (_verify_c("r.toml", "refuse"), ("r.toml", "/dev/urandom")),
    }
    for label, (s, link) in devices.items():
        case(6, label, s, lambda ctx, link=link: (with_fast(ctx), link and ctx.symlink(*link)))

    def sparse(rel: str) -> Callable:
        def setup(ctx):
            with_fast(ctx)
            with open(ctx.path(rel), "wb") as handle:
                handle.truncate(2 * 2**30)

        return setup

    case(6, "sparse-2gib-config", _verify_c("huge.toml", "refuse"), sparse("huge.toml"))
    case(6, "sparse-2gib-model", step("layers huge.py --seq 64", "refuse"), sparse("huge.py"))
    case(
        6,
        "sparse-2gib-csv",
        step(["fit", "huge.csv", "--device", H100, "-o", "p.json"], "refuse"),
        sparse("huge.csv"),
    )
    case(6, "sparse-2gib-in-profile-dir", step([*SUGGEST, "--gpu", "H100"], "ok"), sparse("prof/huge.json"))

    def hf(**fields) -> Callable:
        def setup(ctx):
            config = json.loads((_repo() / TINY_HF).read_text())
            config.update(fields)
            ctx.write("hf/config.json", json.dumps(config))

        return setup

    case(
        6,
        "hf-billion-layers",
        step("layers hf --seq 64", "ok|refuse", timeout=60),
        hf(num_hidden_layers=10**9),
    )
    case(
        6,
        "hf-trillion-width",
        step("layers hf --seq 64", "ok|refuse"),
        hf(hidden_size=10**12, intermediate_size=10**12),
    )
    case(
        6,
        "target-args-nested-deep",
        step(["layers", "tiny.py:build_model(x=" + "[" * 3000 + "]" * 3000 + ")"], "refuse"),
        lambda ctx: ctx.write("tiny.py", tiny_source(args="x=None")),
    )
    case(
        6,
        "json-profile-nested-deep",
        step([*SUGGEST, "--profile", "deep.json"], "refuse"),
        lambda ctx: (ctx.tiny(), ctx.write("deep.json", '{"a": ' + "[" * 100000 + "]" * 100000 + "}")),
    )
    case(
        6,
        "json-filter-nested-deep",
        _verify_c("deep.json", "refuse"),
        lambda ctx: (with_fast(ctx), ctx.write("deep.json", "[" * 100000 + "]" * 100000)),
    )


# --- class 7: Ctrl-C ----------------------------------------------------------------------------------------


def _class_7() -> None:
    grid = ["bench", "--emulate", "--no-png", "--out", "res"]
    first_point = {"wait_glob": "res/run-*.jsonl", "wait_lines": 2, "kept_glob": "res/run-*.jsonl"}
    variants = {
        "after-first-point": (grid, Interrupt(**first_point)),
        "no-compile-workers": ([*grid, "--compile-workers", "0"], Interrupt(**first_point)),
        "during-start": (grid, Interrupt(after_s=3.0, kept_glob="res/run-*.jsonl")),
        "during-import": (grid, Interrupt(after_s=1.5, kept_glob="res/run-*.jsonl")),
        "main-process-only": (grid, Interrupt(group=False, **first_point)),
        "twice": (grid, Interrupt(repeat=2, **first_point)),
        "at-6s": (grid, Interrupt(after_s=6.0, kept_glob="res/run-*.jsonl")),
        "at-9s": (grid, Interrupt(after_s=9.0, kept_glob="res/run-*.jsonl")),
        "at-12s": (grid, Interrupt(after_s=12.0, kept_glob="res/run-*.jsonl")),
        "late": (grid, Interrupt(wait_glob="res/run-*.jsonl", wait_lines=4, kept_glob="res/run-*.jsonl")),
    }
    for label, (argv, interrupt) in variants.items():
        case(
            7,
            f"bench-ctrl-c-{label}",
            step(argv, "interrupt", interrupt=interrupt, outputs=("res/**",), timeout=180),
            slow=True,
        )
    case(
        7,
        "bench-model-ctrl-c",
        step(
            "bench --model tiny.py --emulate --seq 64 --profile fast.json --out res",
            "interrupt",
            interrupt=Interrupt(**first_point),
            outputs=("res/**",),
            timeout=180,
        ),
        with_fast,
        slow=True,
    )
    case(
        7,
        "bench-grouped-ctrl-c",
        step(
            ["bench", "--grouped", "--emulate", "--no-png", "--out", "res"],
            "interrupt|refuse",
            interrupt=Interrupt(**first_point),
            outputs=("res/**",),
            timeout=180,
        ),
        slow=True,
    )
    case(
        7,
        "bench-ctrl-c-then-resume",
        [
            step(
                [*grid, "--M", "64", "--K", "32,64", "--N", "32", "--recipes", "rowwise"],
                "interrupt",
                interrupt=Interrupt(**first_point),
                outputs=("res/**",),
                timeout=180,
            ),
            step(
                [*grid, "--M", "64", "--K", "32,64", "--N", "32", "--recipes", "rowwise"],
                "ok",
                outputs=("res/**",),
                timeout=180,
            ),
            step("fit res --allow-emulated -o p.json", "ok", outputs=("p.json",)),
        ],
        slow=True,
    )
    case(
        7,
        "suggest-ctrl-c",
        step([*SUGGEST, *FAST], "interrupt|ok", interrupt=Interrupt(after_s=2.5)),
        with_fast,
    )
    case(
        7,
        "verify-ctrl-c",
        # exit 0 only when it ended before the signal (a fast machine): nothing to judge then
        step(["verify", "tiny.py", "--config", "fp8.toml"], "interrupt|ok", interrupt=Interrupt(after_s=2.0)),
        lambda ctx: ctx.committed("torchtitan-toml", "fp8.toml"),
        slow=True,
    )


# --- class 8: tracebacks from odd but legal values ----------------------------------------------------------


def _class_8() -> None:
    for seq in ("8",):
        case(8, f"suggest-seq-{seq}", step([*SUGGEST[:2], "--seq", seq, *FAST], "ok|refuse"), with_fast)
    case(8, "layers-seq-8", step("layers tiny.py --seq 8", "ok|refuse"), with_tiny)
    case(
        8,
        "verify-seq-8",
        step(["verify", "tiny.py", "--seq", "8", "--config", "fp8.toml"], "ok|fail|refuse", timeout=90),
        lambda ctx: ctx.committed("torchtitan-toml", "fp8.toml"),
        slow=True,
    )
    for label, args in (
        ("dict-list-key", "x={[1]: 2}"),
        ("tuple-with-list-key", "x={(1, [2]): 3}"),
    ):
        case(
            8,
            f"target-unhashable-{label}",
            step(["layers", f"tiny.py:build_model({args})"], "refuse"),
            lambda ctx: ctx.write("tiny.py", tiny_source(args="x=None")),
        )
    case(
        8,
        "filter-unhashable-constant",
        _verify_c(),
        lambda ctx: (
            with_fast(ctx),
            ctx.write(
                "c.py",
                FILTER_HEAD.replace('frozenset({"blocks.0.up"', 'frozenset({["blocks.0.up"]')
                + "\n\ndef module_filter_fn(module, fqn):\n    return fqn in FLOAT8_LAYERS\n"
                + FILTER_TAIL,
            ),
        ),
        slow=True,
    )
    case(
        8,
        "filter-unhashable-in-body",
        _verify_c(),
        _filter_config("return fqn in {[1]} or fqn in FLOAT8_LAYERS"),
        slow=True,
    )
    case(
        8,
        "yaml-filter-nested-lists",
        _verify_c("c.yaml"),
        lambda ctx: (
            with_fast(ctx),
            ctx.write(
                "c.yaml",
                _yaml("fp8:\n  enabled: true\n  recipe_name: rowwise\n  filter_fqns: [[a, b], {x: 1}]\n"),
            ),
        ),
    )
    case(
        8,
        "yaml-unhashable-key",
        _verify_c("c.yaml"),
        lambda ctx: (
            with_fast(ctx),
            ctx.write("c.yaml", _yaml("fp8:\n  ? [a, b]\n  : 1\n  enabled: true\n")),
        ),
    )
    for tp, expect in (("1000000", "ok|refuse"), ("0", "refuse")):
        case(8, f"suggest-tp-{tp}", step([*SUGGEST, *FAST, "--tp", tp], expect), with_fast)
    case(
        8,
        "suggest-tp-3-indivisible",
        step([*SUGGEST, *FAST, "--tp", "3"], "ok|refuse", contains_if_ok=(r"divi(s|de)",)),
        with_fast,
    )
    for ep in ("3",):
        case(
            8,
            f"suggest-moe-ep-{ep}",
            step(["suggest", "moe.py", "--seq", "64", "--ep", ep], "refuse|ok"),
            lambda ctx: copy_repo_file(ctx, "data/models/moe.py", "moe.py"),
        )
    toml_values = {
        "compile-components-number": ("[compile]\nenable = true", "[compile]\nenable = true\ncomponents = 5"),
        "converters-string": (
            'converters = ["quantize.linear.float8"]',
            'converters = "quantize.linear.float8"',
        ),
        "filter-number": ("filter_fqns = [", "filter_fqns = 5\nx = ["),
        "filter-ints": ('filter_fqns = ["spare"]', "filter_fqns = [1, 2]"),
        "recipe-date": ('recipe_name = "rowwise"', "recipe_name = 1979-05-27"),
        "quantize-number": ("[quantize.linear.float8]\n", "[other]\n"),
    }
    for label, (old, new) in toml_values.items():

        def toml_setup(ctx, old=old, new=new, label=label):
            with_fast(ctx)
            text = _toml(["spare"])
            if label == "quantize-number":
                text = "quantize = 5\n" + text.replace("[quantize.linear.float8]\n", "[q]\n")
            else:
                text = text.replace(old, new)
            ctx.write("c.toml", text)

        case(8, f"toml-{label}", _verify_c("c.toml", "refuse|fail"), toml_setup)
    yaml_values = {
        "int-key": "fp8:\n  1: 2\n  enabled: true\n  recipe_name: rowwise\n",
        "fp8-list": "fp8: [1, 2]\n",
        "bool-key": "fp8:\n  true: x\n  enabled: true\n",
        "filter-mapping": "fp8:\n  enabled: true\n  recipe_name: rowwise\n  filter_fqns: {a: 1}\n",
    }
    for label, body in yaml_values.items():
        case(
            8,
            f"yaml-{label}",
            _verify_c("c.yaml", "refuse|fail"),
            lambda ctx, body=body: (with_fast(ctx), ctx.write("c.yaml", _yaml(body))),
        )
    case(
        8,
        "yaml-top-level-list",  # a YAML list is the bare filter format: read as one, it fails
        _verify_c("c.yaml", "fail|refuse"),
        lambda ctx: (with_fast(ctx), ctx.write("c.yaml", "- fp8\n- enabled\n")),
    )
    case(
        8,
        "yaml-nested-deep",
        _verify_c("c.yaml", "refuse"),
        lambda ctx: (with_fast(ctx), ctx.write("c.yaml", "fp8: " + "[" * 3000 + "]" * 3000 + "\n")),
    )
    case(
        8,
        "toml-nested-deep",
        _verify_c("c.toml", "refuse"),
        lambda ctx: (with_fast(ctx), ctx.write("c.toml", "x = " + "[" * 3000 + "]" * 3000 + "\n")),
    )
    profile_values = {
        "family-list": lambda d: d["device"].__setitem__("family", ["H100"]),
        "device-name-dict": lambda d: d["device"].__setitem__("name", {"a": 1}),
        "capability-text": lambda d: d["device"].__setitem__("compute_capability", "9.0"),
        "point-m-text": lambda d: d["recipes"]["rowwise"]["points"][0].__setitem__("M", "1024"),
        "speedup-overflow": lambda d: json.dumps(d).replace('"speedup": 2.0', '"speedup": 1e400', 1),
        "roofline-list": lambda d: d.__setitem__("roofline", []),
        "recipes-bogus": lambda d: d["recipes"].__setitem__("bogus", {}),
    }
    for label, mutate in profile_values.items():
        case(
            8,
            f"profile-{label}",
            step([*SUGGEST, "--profile", "p.json"], "refuse|ok"),
            mutated_profile(mutate),
        )
    csvs = {
        "binary": bytes(range(256)) * 8,
        "missing-column": b"recipe,M,K,speedup\nrowwise,1024,1024,1.5\n",
        "speedup-text": b"recipe,M,K,N,speedup\nrowwise,1024,1024,1024,fast\n",
        "semicolons": b"recipe;M;K;N;speedup\nrowwise;1024;1024;1024;1.5\n",
        "nul-byte": b"recipe,M,K,N,speedup\nrowwise,10\x0024,1024,1024,1.5\n",
        "conflicting-rows": b"recipe,M,K,N,speedup\nrowwise,1024,1024,1024,1.5\nrowwise,1024,1024,1024,0.5\n",
        "utf16": "recipe,M,K,N,speedup\nrowwise,1024,1024,1024,1.5\n".encode("utf-16"),
    }
    for label, data in csvs.items():
        case(
            8,
            f"fit-csv-{label}",
            step(["fit", "t.csv", "--device", H100, "-o", "p.json"], "refuse|ok", outputs=("p.json",)),
            lambda ctx, data=data: ctx.write("t.csv", data),
        )
    raising = (
        "class Odd(Exception):\n    def __str__(self):\n        raise RuntimeError('no str')\n"
        "    def __repr__(self):\n        raise RuntimeError('no repr')\n"
    )
    case(
        8,
        "exception-str-raises-build",
        step("layers tiny.py --seq 64", "refuse"),
        lambda ctx: ctx.tiny(prelude=raising, build="raise Odd()"),
    )
    case(
        8,
        "exception-str-raises-forward",
        step("layers tiny.py --seq 64", "refuse"),
        lambda ctx: ctx.tiny(prelude=raising, forward="raise Odd()"),
    )
    case(
        8,
        "exception-str-raises-import",
        step("layers tiny.py --seq 64", "refuse"),
        lambda ctx: ctx.tiny(prelude=raising + "raise Odd()\n"),
    )
    case(
        8,
        "exception-huge-message",
        step("layers tiny.py --seq 64", "refuse"),
        lambda ctx: ctx.tiny(build="raise ValueError('x' * 10_000_000)"),
    )
    case(
        8,
        "base-exception-str-raises",
        step("layers tiny.py --seq 64", "refuse"),
        lambda ctx: ctx.tiny(prelude=raising.replace("(Exception)", "(BaseException)"), build="raise Odd()"),
    )
    case(
        8,
        "model-raises-keyboard-interrupt",
        step("layers tiny.py --seq 64", "refuse|interrupt"),
        lambda ctx: ctx.tiny(build="raise KeyboardInterrupt"),
    )
    for label, build in (("none", "return None"), ("class", "return Net")):
        case(
            8,
            f"model-returns-{label}",
            step("layers tiny.py --seq 64", "refuse"),
            lambda ctx, b=build: ctx.tiny(build=b),
        )
    options = {
        "min-speedup-nan": ["--min-speedup", "nan"],
        "min-speedup-inf": ["--min-speedup", "inf"],
        "imbalance-nan": ["--expert-imbalance", "nan"],
        "world-size-zero": ["--world-size", "0"],
        "recipe-upper": ["--recipe", "ROWWISE"],
        "gpu-empty": ["--gpu", ""],
        "batch-zero": ["--batch", "0"],
    }
    for label, extra in options.items():
        case(8, f"option-{label}", step([*SUGGEST, *FAST, *extra, "--json"], "refuse|ok"), with_fast)
    bench_options = {
        "m-zero": ["--M", "0"],
        "recipes-bogus": ["--recipes", "bogus"],
        "compile-timeout-nan": ["--compile-timeout", "nan"],
        "time-budget-nan": ["--time-budget", "nan"],
        "shard-zero": ["--shard", "0/0"],
        "shard-past-end": ["--shard", "5/3"],
    }
    for label, extra in bench_options.items():
        case(
            8,
            f"bench-{label}",
            step(["bench", "--emulate", "--no-png", "--out", "res", *extra], "refuse", timeout=60),
        )
    for label, target in (
        ("missing-factory", "tiny.py:nonexistent"),
        ("factory-syntax", "tiny.py:build_model("),
        ("factory-expression", "tiny.py:__import__('os').system('touch CANARY')"),
    ):
        case(8, f"target-{label}", step(["layers", target], "refuse"), with_tiny)


# --- class 9: outputs that look successful and are not ------------------------------------------------------


def _class_9() -> None:
    fits = {
        "inf-speedup": ["rowwise,1024,1024,1024,inf"],
        "absurd-m": ["rowwise,1000000000000000,1024,1024,1.5"],
        "tiny-speedup": ["rowwise,2048,2048,2048,1e-300"],
        "huge-speedup": ["rowwise,2048,2048,2048,1e300"],
        "zero-speedup": ["rowwise,2048,2048,2048,0"],
    }
    for label, rows in fits.items():
        case(
            9,
            f"fit-{label}-readable",
            step(
                ["fit", "t.csv", "--device", H100, "-o", "p.json", "--json"],
                "ok|refuse",
                outputs=("p.json",),
                checks=(readable_by_suggest("p.json"),),
            ),
            lambda ctx, rows=rows: (ctx.tiny(), _fast_csv(ctx, "t.csv", extra_rows=rows)),
        )
    case(
        9,
        "fit-single-point-readable",
        step(
            ["fit", "t.csv", "--device", H100, "-o", "p.json", "--json"],
            "ok|refuse",
            outputs=("p.json",),
            checks=(readable_by_suggest("p.json"),),
        ),
        lambda ctx: (ctx.tiny(), ctx.write("t.csv", "recipe,M,K,N,speedup\nrowwise,1024,1024,1024,1.5\n")),
    )
    case(
        9,
        "fit-created-not-a-date",
        step(
            ["fit", "fast.csv", "--device", H100, "--created", "not a date", "-o", "p.json"],
            "ok|refuse",
            outputs=("p.json",),
            checks=(readable_by_suggest("p.json"),),
        ),
        lambda ctx: (ctx.tiny(), _fast_csv(ctx)),
    )
    case(
        9,
        "fit-name-with-space-by-name",
        [
            step(
                ["fit", "fast.csv", "--device", H100, "--name", "my profile"],
                "ok|refuse",
                outputs=("prof/*",),
            ),
            step([*SUGGEST, "--profile", "my profile", "--json"], "ok", after_ok=True),
        ],
        lambda ctx: (ctx.tiny(), _fast_csv(ctx)),
    )
    extremes = {
        "huge-speedups": lambda d: json.dumps(d).replace('"speedup": 2.0', '"speedup": 1e300'),
        "tiny-speedups": lambda d: json.dumps(d).replace('"speedup": 2.0', '"speedup": 1e-300'),
        "roofline-extremes": lambda d: d["roofline"].update(bandwidth_bytes_per_s=1e-300, bf16_flops=1e300),
    }
    for label, mutate in extremes.items():
        base = "h100-roofline" if label == "roofline-extremes" else "fast"
        case(
            9,
            f"profile-{label}-json",
            step([*SUGGEST, "--profile", "p.json", "--json"], "ok|refuse"),
            mutated_profile(mutate, base=base),
        )
    case(
        9,
        "min-speedup-huge-json",
        step([*SUGGEST, *FAST, "--min-speedup", "1e308", "--json"], "ok|refuse"),
        with_fast,
    )
    case(
        9,
        "fit-json",
        step(["fit", "res", "-o", "p.json", "--json"], "ok", outputs=("p.json",)),
        lambda ctx: copy_repo_file(ctx, H100_RESULTS, "res/run-20261122T100000Z-h100aaaa.jsonl"),
    )
    case(9, "layers-json", step("layers tiny.py --seq 64 --json", "ok"), with_tiny)
    case(
        9,
        "verify-json",
        step(["verify", "tiny.py", "--config", "fp8.toml", "--json"], "ok", timeout=90),
        lambda ctx: ctx.committed("torchtitan-toml", "fp8.toml"),
        slow=True,
    )
    case(
        9,
        "hf-suggest-json",
        step("suggest hf --seq 64 --json", "ok"),
        lambda ctx: copy_repo_file(ctx, TINY_HF, "hf/config.json"),
    )
    for fmt, out in (
        ("torchao", "fp8.py"),
        ("accelerate", "fp8.py"),
        ("torchtitan-toml", "fp8.toml"),
        ("nemo-automodel", "fp8.yaml"),
        ("torchtitan-py", "fp8.py"),
        ("filter", "f.txt"),
        ("filter", "f.json"),
    ):
        label = f"{fmt}-{out.rsplit('.', 1)[1]}"
        steps = [
            suggest_to(fmt, out, extra=FAST, expect="ok"),
            step([*SUGGEST, *FAST, "--format", fmt, "--check", out], "ok", after_ok=True),
        ]
        if fmt != "torchtitan-py":
            steps.append(step(["verify", "tiny.py", "--config", out], "ok", after_ok=True, timeout=90))
        case(9, f"write-check-verify-{label}", steps, with_fast, slow=True)
    case(
        9,
        "bench-fit-suggest-chain",
        [
            step(
                [
                    "bench",
                    "--emulate",
                    "--M",
                    "64",
                    "--K",
                    "32,64",
                    "--N",
                    "32,64",
                    "--recipes",
                    "rowwise",
                    "--no-png",
                    "--compile-workers",
                    "0",
                    "--out",
                    "res",
                ],
                "ok",
                outputs=("res/**",),
                timeout=180,
            ),
            step(
                "fit res --allow-emulated -o p.json",
                "ok",
                outputs=("p.json",),
                after_ok=True,
                checks=(readable_by_suggest("p.json"),),
            ),
        ],
        with_tiny,
        slow=True,
    )


# --- class 10: small but real -------------------------------------------------------------------------------

BOM = "\ufeff"


def _class_10() -> None:
    case(
        10,
        "bom-model",
        step("layers tiny.py --seq 64", "ok"),
        lambda ctx: ctx.write("tiny.py", BOM + tiny_source()),
    )
    for fmt, rel in (("torchtitan-toml", "fp8.toml"), ("nemo-automodel", "fp8.yaml"), ("torchao", "fp8.py")):

        def bom_config(ctx, fmt=fmt, rel=rel):
            path = ctx.committed(fmt, rel)
            path.write_text(BOM + path.read_text())

        case(10, f"bom-config-{fmt}", _verify(rel, "ok"), bom_config, slow=True)
    case(
        10,
        "bom-csv",
        step(
            ["fit", "t.csv", "--device", H100, "-o", "p.json"],
            "ok",
            outputs=("p.json",),
            checks=(readable_by_suggest("p.json"),),
        ),
        lambda ctx: (ctx.tiny(), ctx.write("t.csv", BOM + "recipe,M,K,N,speedup\n" + _csv_rows())),
    )
    case(
        10,
        "bom-profile",
        step([*SUGGEST, "--profile", "p.json"], "ok|refuse"),
        lambda ctx: (ctx.tiny(), ctx.write("p.json", BOM + json.dumps(ctx.fixtures.fast_profile()))),
    )
    case(
        10,
        "bom-hf-config",
        step("layers hf --seq 64", "ok|refuse"),
        lambda ctx: ctx.write("hf/config.json", BOM + (_repo() / TINY_HF).read_text()),
    )
    case(
        10,
        "bom-filter-json",
        _verify_c("f.json", "ok|refuse"),
        lambda ctx: (with_fast(ctx), ctx.write("f.json", BOM + '["spare"]\n')),
        slow=True,
    )

    def auto_map(with_code: bool) -> Callable:
        def setup(ctx):
            config = json.loads((_repo() / TINY_HF).read_text())
            config["auto_map"] = {
                "AutoConfig": "modeling_evil.EvilConfig",
                "AutoModelForCausalLM": "modeling_evil.EvilModel",
            }
            ctx.write("hf/config.json", json.dumps(config))
            if with_code:
                ctx.write("hf/modeling_evil.py", f"open({str(ctx.canary)!r}, 'w')\n")
                ctx.write("hf/configuration_evil.py", f"open({str(ctx.canary)!r}, 'w')\n")

        return setup

    case(10, "hf-auto-map-no-prompt", step("layers hf --seq 64", "ok|refuse", timeout=60), auto_map(False))
    case(10, "hf-auto-map-code-not-run", step("suggest hf --seq 64", "ok|refuse", timeout=60), auto_map(True))
    case(
        10,
        "check-dev-null",
        step([*SUGGEST, "--format", "filter", "--check", "/dev/null"], "refuse"),
        with_tiny,
    )
    case(
        10,
        "check-empty-file",
        step([*SUGGEST, "--format", "filter", "--check", "e.txt"], "fail|refuse"),
        lambda ctx: (ctx.tiny(), ctx.write("e.txt", "")),
    )
    case(10, "config-dev-null", _verify("/dev/null", "refuse"), with_tiny)
    case(
        10,
        "bare-filter-json-then-verify",
        [
            suggest_to("filter", "f.json", extra=FAST, expect="ok"),
            step(["verify", "tiny.py", "--config", "f.json"], "ok", after_ok=True, timeout=90),
        ],
        with_fast,
        slow=True,
    )
    for label, name in (
        ("parent-parent", "../../x"),
        ("absolute", "@ROOT@/abs/x"),
        ("subfolder", "a/b"),
        ("empty", ""),
    ):
        case(
            10,
            f"fit-name-{label}",
            step(
                ["fit", "fast.csv", "--device", H100, "--name", name],
                "ok|refuse",
                outputs=("prof/*",),
                checks=(forbid_new_files("prof/*"), forbid_new_files(where="root")),
            ),
            _fast_csv,
        )
    nul = {
        "model": (
            "layers tiny.py --seq 64",
            "tiny.py",
            lambda ctx: tiny_source().replace("import torch\n", "import torch\n\x00\n", 1),
        ),
        "toml-config": (None, "c.toml", lambda ctx: _toml(["spa\x00re"])),
        "yaml-config": (
            None,
            "c.yaml",
            lambda ctx: _yaml("fp8:\n  enabled: true\n  filter_fqns: [sp\x00]\n"),
        ),
        "profile": (
            [*SUGGEST, "--profile", "p.json"],
            "p.json",
            lambda ctx: json.dumps(ctx.fixtures.fast_profile()).replace('"name": "fast"', '"name": "f\x00"'),
        ),
    }
    for label, (argv, rel, text) in nul.items():
        s = (
            step(argv, "refuse", absent=("line None",))
            if argv
            else _verify_c(rel, "refuse", absent=("line None",))
        )
        case(
            10,
            f"nul-byte-{label}",
            s,
            lambda ctx, rel=rel, text=text: (
                with_fast(ctx) if rel != "tiny.py" else None,
                ctx.write(rel, text(ctx)),
            ),
        )
    case(
        10,
        "system-exit-in-forward",
        step("layers tiny.py --seq 64", "refuse", contains=("tiny.py:",), absent=("contextlib",)),
        lambda ctx: ctx.tiny(prelude="import sys\n", forward="sys.exit(3)"),
    )
    case(
        10,
        "system-exit-zero-in-build",
        step("layers tiny.py --seq 64", "refuse", contains=("tiny.py:",), absent=("contextlib",)),
        lambda ctx: ctx.tiny(prelude="import sys\n", build="sys.exit(0)"),
    )
    case(
        10,
        "crlf-model",
        step("layers tiny.py --seq 64", "ok"),
        lambda ctx: ctx.write("tiny.py", tiny_source().replace("\n", "\r\n").encode()),
    )
    case(
        10,
        "latin1-model-with-cookie",
        step("layers tiny.py --seq 64", "ok"),
        lambda ctx: ctx.write(
            "tiny.py", ("# -*- coding: latin-1 -*-\n# caf\u00e9\n" + tiny_source()).encode("latin-1")
        ),
    )
    case(
        10,
        "latin1-model-without-cookie",
        step("layers tiny.py --seq 64", "refuse"),
        lambda ctx: ctx.write("tiny.py", ("# caf\u00e9\n" + tiny_source()).encode("latin-1")),
    )
    case(
        10,
        "model-path-is-directory",
        step("layers dir.py --seq 64", "refuse"),
        lambda ctx: ctx.path("dir.py/x"),
    )
    case(10, "output-without-suffix", step([*SUGGEST, "-o", "config"], "refuse"), with_tiny)
    space = "my model.py"
    case(
        10,
        "model-path-space",
        suggest_to("torchtitan-toml", target=space, extra=FAST),
        lambda ctx: (ctx.tiny(space), ctx.profile("fast.json")),
    )
    case(
        10,
        "target-with-factory-args-check-command",
        suggest_to("torchtitan-toml", target="tiny.py:build_model(x=2)", extra=FAST),
        lambda ctx: (ctx.write("tiny.py", tiny_source(args="x=None")), ctx.profile("fast.json")),
    )
    case(
        10,
        "model-path-unicode",
        step(["layers", "mod\u00e8le.py", "--seq", "64"], "ok"),
        lambda ctx: ctx.tiny("mod\u00e8le.py"),
    )
    case(10, "empty-model", step("layers e.py --seq 64", "refuse"), lambda ctx: ctx.write("e.py", ""))
    case(
        10,
        "model-syntax-error",
        step("layers s.py --seq 64", "refuse", contains=("s.py:",)),
        lambda ctx: ctx.write("s.py", "import torch\ndef build_model(:\n    pass\n"),
    )
    case(
        10,
        "model-missing-import",
        step("layers tiny.py --seq 64", "refuse"),
        lambda ctx: ctx.tiny(prelude="import no_such_module_fp8fuzz\n"),
    )
    case(
        10,
        "hf-config-empty-object",
        step("layers hf --seq 64", "refuse"),
        lambda ctx: ctx.write("hf/config.json", "{}"),
    )
    case(10, "config-is-the-model", _verify("tiny.py", "refuse"), with_tiny)
    case(10, "profile-unknown-name", step([*SUGGEST, "--profile", "no-such-profile"], "refuse"), with_tiny)
    header_edits = {
        "seq-text": ("--seq 64", "--seq abc"),
        "batch-huge": ("--batch 1", "--batch 99999999999999999999999"),
        "profile-traversal": ("--profile fast.json", "--profile ../../../etc/passwd"),
    }
    for label, (old, new) in header_edits.items():
        case(
            10,
            f"edited-header-{label}",
            _verify("fp8.toml", "refuse|fail"),
            _committed_plus("torchtitan-toml", "fp8.toml", replace=(old, new)),
            slow=True,
        )


def _csv_rows() -> str:
    rows = []
    for m in (16, 64, 256, 1024):
        for k in (32, 64, 256, 1024):
            for n in (32, 64, 256, 1024):
                rows.append(f"rowwise,{m},{k},{n},2.0")
    return "\n".join(rows) + "\n"


def all_cases() -> list[Case]:
    if not CASES:
        for build in (
            _class_1,
            _class_2,
            _class_3,
            _class_4,
            _class_5,
            _class_6,
            _class_7,
            _class_8,
            _class_9,
            _class_10,
        ):
            build()
    return list(CASES)
