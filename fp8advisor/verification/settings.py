"""The settings `verify` advises with, and the advice they give.

`advice_settings` merges a command line with the header `fp8advisor suggest` wrote into the config (the
command line wins, and the disagreement is said); `advice_for` runs `advise` with them for the model, as
`suggest` did (the MoE experts' `--expert-imbalance` included), so that the config is checked against the
very advice it was written from. `requested_float8_all_gather` is the FSDP float8 all-gather the config must
set up: the request's, for a file `suggest` wrote (its check command carries `--float8-all-gather`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fp8advisor.frameworks.config_record import FrameworkConfig
from fp8advisor.inspect.records import ModelLayers
from fp8advisor.recipes import Recipe
from fp8advisor.request import AUTO, SuggestRequest


def advice_settings(
    config_path: str | Path, target: str | None = None, **given: Any
) -> tuple[SuggestRequest, tuple[str, ...], str | None]:
    """The request to advise with: each setting `given` on the command line (not None; the names of
    `SuggestRequest`), else the one in the header `fp8advisor suggest` wrote into the config
    (`fp8advisor.frameworks.header.read_header`), else the default. Also the names of the settings taken from
    the header, and one line saying where the command line disagrees with the header (the command line wins;
    a `target` other than the one the header names is said too), or None. A file without such a header gives
    the command line and the defaults; a file that cannot be read as a config (missing, a pipe or a device,
    not UTF-8 text: `frameworks.reader.read_config_text`) is a ConfigError."""
    from fp8advisor.frameworks.header import read_header
    from fp8advisor.frameworks.reader import read_config_text

    header = read_header(read_config_text(config_path))
    written_target = header.request.target if header is not None else None
    request = SuggestRequest(target if target is not None else written_target or "")
    merged, from_header, disagreements = request.merge_with_header(
        given, header.written() if header is not None else None
    )
    if target is not None and written_target is not None and target != written_target:
        disagreements.insert(0, f"TARGET {target} (header: {written_target})")
    message = None
    if disagreements:
        message = (
            f"the command line differs from the header fp8advisor suggest wrote in {config_path}: "
            f"{', '.join(disagreements)}; advising with the command line's values"
        )
    return merged, from_header, message


def advice_for(
    model_layers: ModelLayers,
    config: FrameworkConfig,
    requested_recipe: Recipe | None,
    request: SuggestRequest,
    predictor: Callable | None,
):
    """`advise` for the model, with --recipe, else the config's recipe, else (a bare filter list) "auto"; with
    the tensor- and expert-parallel degrees, the in-context results and the traced speedups (--trace)
    `suggest` advised with."""
    from fp8advisor.advice.decide import advise
    from fp8advisor.advice.in_context import in_context_reader

    choice = _profile_choice(request.profile, predictor, request.grouped_profile)
    in_context = None
    if request.measured is not None:
        in_context = in_context_reader(
            request.measured,
            automatic=False,
            model_layers=model_layers,
            family=choice.primary.family,
            tensor_parallel=request.tensor_parallel,
        )
    if request.trace is not None:
        from fp8advisor.advice.trace_evidence import traced_predictor

        predictor = traced_predictor(request.trace, choice, predictor)
    return advise(
        model_layers,
        choice,
        requested_recipe or config.recipe or AUTO,
        request.min_speedup,
        predictor=predictor,
        device_capability=None,
        compare_torchao_auto=False,
        tensor_parallel=request.tensor_parallel,
        in_context=in_context,
        expert_imbalance=request.expert_imbalance,
        expert_parallel=request.expert_parallel,
    )


def requested_float8_all_gather(config_path: str | Path, request: SuggestRequest) -> bool | None:
    """The FSDP float8 all-gather `verify` compares the config's with (`differences.config_differences`):
    the request's where it comes from a header `fp8advisor suggest` wrote (absent from the check command:
    off), or where the request turns it on; None for a hand-written file verified without it (nothing asks
    for either value: its framework's default is no difference)."""
    from fp8advisor.frameworks.header import read_header
    from fp8advisor.frameworks.reader import read_config_text

    if request.float8_all_gather or read_header(read_config_text(config_path)) is not None:
        return request.float8_all_gather
    return None


def _profile_choice(profile: str | None, predictor: Callable | None, grouped_profile: str | None = None):
    if predictor is not None and profile is None:
        return _TestProfile()
    from fp8advisor.predict.selection import select_profile

    return select_profile(profile, grouped=grouped_profile)


class _TestProfile:
    """Stands for a profile when a test supplies its own predictor."""

    name = "test predictor"
    provenance = "modelled"
    family = "test"  # no GPU family: in-context results of any real GPU are refused

    @property
    def primary(self) -> _TestProfile:  # a profile choice of one profile, as `select_profile` returns
        return self

    def describe(self) -> str:
        return self.name

    def covers(self, recipe) -> bool:
        return True


__all__ = ["advice_for", "advice_settings", "requested_float8_all_gather"]
