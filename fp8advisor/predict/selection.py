"""Which profile a GPU gets: `select_profile` picks the best one for a GPU and pairs it with the modelled
roofline profile of the same GPU, which answers for the recipes the primary profile does not cover
(`ProfileChoice`), and with the profile whose grouped expert GEMM figures answer for the MoE experts.

The order (the user's own, then shipped: the evidence profile chosen by held-out error, else measured before
published before modelled; the shipped H100 profile for a GPU without one) is `select_profile`'s docstring.
Each profile directory is read once per selection; a file in it that is not a readable profile is passed over
and named in `ProfileChoice.passed_over`, for the caller to warn about; a profile the user names (--profile,
--grouped-profile) that is bad is an error. A profile is named by any safe name (`fields.read_name_problem`,
through `load_profile` and the profile reader): names that older versions of `fit` wrote, such as `my h100
(table)`, are read and picked.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from pathlib import Path

from fp8advisor.errors import ProfileError, quote
from fp8advisor.gpus import gpu_family, sibling_family
from fp8advisor.predict.figures import PROVENANCE_RANK
from fp8advisor.predict.grouped_profile import GroupedProfile
from fp8advisor.predict.profile import Profile
from fp8advisor.predict.profile_files import load_profile, profiles_in, shipped_profile_dir, user_profile_dir
from fp8advisor.recipes import Recipe

#: The family whose shipped profile answers for GPUs that have none of their own.
DEFAULT_FAMILY = "H100"


@dataclass(frozen=True)
class ProfileChoice:
    """The profile chosen for a GPU, with the modelled profile that answers where it has no figures.

    `primary` answers for the recipes it covers; `fallback` (the roofline profile of the same GPU family, None
    when the primary is itself modelled or no model exists) answers for the others. `reason` says why, for
    people.
    """

    primary: Profile
    fallback: Profile | None
    reason: str
    #: The profile whose grouped expert GEMM figures answer when it is not the primary: the one given with
    #: --grouped-profile, else (the primary having none) the best profile of the same GPU family that has
    #: them (`select_profile`); None when none has, or the primary's own answer.
    grouped_source: Profile | None = None
    #: --grouped-profile none: the grouped roofline predicts the experts, whatever profile has figures.
    grouped_off: bool = False
    #: The profile files the choice passed over ("file: why"): unreadable or malformed files met in the
    #: profile directories, each named once, for the caller to warn about (`select_profile`).
    passed_over: tuple[str, ...] = ()

    @property
    def grouped_profile(self) -> Profile | None:
        """The profile whose grouped expert GEMM figures predict the experts, None when no profile of this GPU
        has measured them or --grouped-profile none was given (the grouped roofline answers)."""
        if self.grouped_off:
            return None
        if self.grouped_source is not None:
            return self.grouped_source
        return self.primary if self.primary.grouped is not None else None

    @property
    def grouped(self) -> GroupedProfile | None:
        """The grouped expert GEMM figures to predict with (`GroupedProfile`), None when no profile of this
        GPU has measured them."""
        source = self.grouped_profile
        return source.grouped if source is not None else None

    @property
    def name(self) -> str:
        return self.primary.name

    @property
    def path(self) -> Path | None:
        return self.primary.path

    @property
    def provenance(self) -> str:
        return self.primary.provenance

    def covers(self, recipe: Recipe | str) -> bool:
        return self.primary.covers(recipe) or (self.fallback is not None and self.fallback.covers(recipe))

    def profile_for(self, recipe: Recipe | str) -> Profile:
        """The profile that answers for `recipe`: the primary when it covers it, else the fallback."""
        if self.primary.covers(recipe):
            return self.primary
        if self.fallback is not None and self.fallback.covers(recipe):
            return self.fallback
        return self.primary  # raises a clear ProfileError on use

    def describe(self) -> str:
        text = f"profile {self.primary.describe()}: {self.reason}"
        if self.fallback is not None:
            text += f"; other recipes and sizes from {self.fallback.name} ({self.fallback.provenance})"
        if self.grouped_source is not None and self.grouped is not None:
            text += f"; MoE expert grouped GEMMs from {self.grouped_source.name} ({self.grouped.provenance})"
        if self.grouped_off:
            text += f"; MoE expert grouped GEMMs from the roofline (--grouped-profile {NO_GROUPED_PROFILE})"
        return text


class _Scans:
    """The profile directories one selection reads, each once, and the files passed over in them: a file
    that is not a readable profile is skipped and named in `passed_over` ("file: why"), never fatal, so that
    one bad file cannot block every suggest."""

    def __init__(self) -> None:
        self.passed_over: list[str] = []
        self._found: dict[Path, list[Profile]] = {}

    def profiles(self, directory: Path) -> list[Profile]:
        if directory not in self._found:
            self._found[directory] = profiles_in(directory, self.passed_over)
        return self._found[directory]


def modelled_profile_for(family: str | None, scans: _Scans | None = None) -> Profile | None:
    """The shipped roofline profile of a GPU family, None when none is shipped."""
    if family is None:
        return None
    for profile in (scans or _Scans()).profiles(shipped_profile_dir()):
        if profile.is_modelled and profile.family == family:
            return profile
    return None


def _pair(
    primary: Profile,
    reason: str,
    scans: _Scans,
    grouped_source: Profile | None = None,
    *,
    grouped_given: bool = False,
) -> ProfileChoice:
    """The choice of `primary`; `grouped_source` answers for the experts when given with --grouped-profile
    (`grouped_given`), else only when the primary has no grouped figures of its own."""
    fallback = None if primary.is_modelled else modelled_profile_for(primary.family, scans)
    if primary.grouped is not None and not grouped_given:
        grouped_source = None
    return ProfileChoice(
        primary=primary,
        fallback=fallback,
        reason=reason,
        grouped_source=grouped_source,
        passed_over=tuple(scans.passed_over),
    )


def _grouped_source(family: str | None, user_profiles: list[Profile], scans: _Scans) -> Profile | None:
    """The best profile of `family` with grouped expert GEMM figures: the user's own (measured before
    published, then the newest), else a shipped one; emulated ones never."""
    if family is None:
        return None
    for candidates in (user_profiles, scans.profiles(shipped_profile_dir())):
        grouped = [
            p
            for p in candidates
            if p.family == family and p.grouped is not None and p.provenance in ("measured", "published")
        ]
        if grouped:
            return _best(grouped)
    return None


#: `--grouped-profile none`: predict the experts with the grouped roofline (pinned in a check command when no
#: profile's grouped figures were used, so that a grouped profile found on another machine does not count).
NO_GROUPED_PROFILE = "none"


def load_grouped_profile(name_or_path: str | Path) -> Profile:
    """The profile given with --grouped-profile (a name or path, as `load_profile`); it must hold grouped
    expert GEMM figures (`fit` of `bench --grouped` results)."""
    profile = load_profile(name_or_path)
    if profile.grouped is None:
        raise ProfileError(
            f"profile {quote(profile.name)} has no grouped expert GEMM figures",
            hint="give --grouped-profile a profile `fit` made from `bench --grouped` results",
        )
    return profile


def _requested_profile(name_or_path: str | Path) -> Profile:
    """The profile given with --profile; a profile of grouped expert GEMMs alone is refused (it has no Linear
    recipe to predict with), saying to pass it as --grouped-profile."""
    profile = load_profile(name_or_path)
    if not profile.recipes and profile.grouped is not None:
        raise ProfileError(
            f"profile {quote(profile.name)} is a grouped-only profile (MoE expert GEMMs, no Linear recipe)",
            hint=f"pass it as --grouped-profile {shlex.quote(str(name_or_path))} (the Linear profile is then "
            "chosen as usual)",
        )
    return profile


def _detect_device_name() -> str | None:
    """The name of CUDA device 0, or None without a GPU (torch imported only here)."""
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except Exception:  # a broken CUDA install must not stop advice from the shipped profiles
        return None
    return None


def _best(profiles: list[Profile]) -> Profile:
    """Measured before published before modelled; among equals the newest (`created`, then name)."""
    best_rank = min(PROVENANCE_RANK[profile.provenance] for profile in profiles)
    return max(
        (profile for profile in profiles if PROVENANCE_RANK[profile.provenance] == best_rank),
        key=lambda profile: (profile.created, profile.name),
    )


def _shipped_best(profiles: list[Profile]) -> Profile:
    """Among shipped profiles, the evidence profile first (it is fitted to every shipped table and measured
    profile and chosen by held-out error, `fp8advisor.predict.loso`), else `_best`."""
    evidence = [profile for profile in profiles if profile.provenance == "evidence"]
    return _best(evidence or profiles)


def select_profile(
    requested: str | Path | None = None,
    *,
    grouped: str | Path | None = None,
    device_name: str | None = None,
    detect_device: bool = True,
) -> ProfileChoice:
    """Choose the profile to predict with, and say why.

    `requested` (a name or path) wins. Otherwise, for the GPU `device_name` (detected from CUDA device 0 when
    None and `detect_device`): a profile the user made for this GPU family (in `user_profile_dir()`, the
    newest; measured before published) > the shipped one for this family (the evidence profile, else measured
    or published before modelled) > the shipped H100 one. The result pairs it with the modelled roofline
    profile of the same family. A file in a profile directory that is not a readable profile is passed over
    and named in the choice's `passed_over`; a profile named with `requested` or `grouped` that is bad is a
    `ProfileError`.

    The MoE experts' grouped GEMM figures: `grouped` (--grouped-profile, a name or path; "none": the grouped
    roofline) wins; else the
    chosen profile's own; else the best profile of its GPU family that has them (`_grouped_source`), for a
    requested profile too.
    """
    off = grouped is not None and str(grouped) == NO_GROUPED_PROFILE
    given = load_grouped_profile(grouped) if grouped is not None and not off else None
    scans = _Scans()
    choice = _select_profile(requested, scans, device_name=device_name, detect_device=detect_device)
    if off:
        return replace(choice, grouped_source=None, grouped_off=True)
    if given is not None:
        return _pair(choice.primary, choice.reason, scans, given, grouped_given=True)
    return choice


def _select_profile(
    requested: str | Path | None, scans: _Scans, *, device_name: str | None, detect_device: bool
) -> ProfileChoice:
    """The profile `select_profile` chooses before --grouped-profile is applied."""
    if requested is not None:
        primary = _requested_profile(requested)
        own = [p for p in scans.profiles(user_profile_dir()) if p.family == primary.family]
        return _pair(primary, "requested with --profile", scans, _grouped_source(primary.family, own, scans))
    if device_name is None and detect_device:
        device_name = _detect_device_name()
    # a GPU the roofline table lacks is its own family, so that the user's profile of it is still found
    family = gpu_family(device_name) or device_name
    gpu_words = f"{device_name} ({family})" if family != device_name else (device_name or "no GPU found")

    # One bad file among the user's own must not block every suggest: it is passed over (`scans`), and said.
    grouped_source = None
    if family is not None:
        own = [p for p in scans.profiles(user_profile_dir()) if p.family == family]
        grouped_source = _grouped_source(family, own, scans)
        # A profile of grouped expert GEMMs only (no Linear recipe) answers for the experts, not as primary.
        user_profiles = [p for p in own if p.provenance in ("measured", "published") and p.recipes]
        if user_profiles:
            return _pair(
                _best(user_profiles),
                f"your own profile for {gpu_words} in {user_profile_dir()}",
                scans,
                grouped_source,
            )
        shipped = [
            p
            for p in scans.profiles(shipped_profile_dir())
            if p.family == family and p.provenance != "emulated" and p.recipes
        ]
        if shipped:
            why = f"the shipped profile for {gpu_words}"
            return _pair(_shipped_best(shipped), why, scans, grouped_source)
        sibling = _sibling_shipped(family, scans)
        if sibling:  # GB200, B300: Blackwell's shipped profile (and its MXFP8 roofline), not Hopper's
            why = f"no shipped profile for {gpu_words}: "
            why += f"the shipped {sibling[0].family} one (same architecture)"
            return _pair(_shipped_best(sibling), why, scans, grouped_source)

    shipped_default = [p for p in _shipped_with_figures(scans) if p.family == DEFAULT_FAMILY]
    if not shipped_default:
        raise ProfileError(
            f"no shipped {DEFAULT_FAMILY} profile found in {shipped_profile_dir()}",
            hint="reinstall fp8advisor, or pass --profile PATH",
        )
    why = f"no profile for {device_name}" if device_name else "no GPU found"
    grouped_source = grouped_source or _grouped_source(DEFAULT_FAMILY, [], scans)
    return _pair(
        _shipped_best(shipped_default), f"{why}: the shipped {DEFAULT_FAMILY} profile", scans, grouped_source
    )


def _shipped_with_figures(scans) -> list:
    """The shipped profiles a GPU without its own may borrow: measured, evidence or published, with
    recipes."""
    return [
        p
        for p in scans.profiles(shipped_profile_dir())
        if p.provenance in ("measured", "evidence", "published") and p.recipes
    ]


def _sibling_shipped(family: str, scans) -> list:
    """The shipped profiles of a family of `family`'s architecture (`gpus.sibling_family`), if any."""
    shipped = _shipped_with_figures(scans)
    sibling = sibling_family(family, {p.family for p in shipped})
    return [p for p in shipped if p.family == sibling] if sibling else []


__all__ = [
    "DEFAULT_FAMILY",
    "NO_GROUPED_PROFILE",
    "ProfileChoice",
    "load_grouped_profile",
    "modelled_profile_for",
    "select_profile",
]
