"""Profiles: the JSON format and its validation, loading by name or path, and which profile is selected."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _bench_helpers import load_benchmark  # noqa: E402

from fp8advisor.errors import ProfileError
from fp8advisor.paths import PROFILES_DIR
from fp8advisor.predict.figures import SpeedupPoint
from fp8advisor.predict.profile import DeviceInfo, Profile, RecipeProfile, dumps_profile
from fp8advisor.predict.profile_files import (
    PROFILE_DIR_ENV,
    list_profiles,
    load_profile,
    save_profile,
    user_profile_dir,
)
from fp8advisor.predict.selection import select_profile

SHIPPED = (
    "h100-published-rowwise-2025-06",
    "h200-measured-2026-11-26",
    "h100-roofline",
    "h200-roofline",
    "b200-roofline",
)


@pytest.fixture(autouse=True)
def empty_user_dir(tmp_path, monkeypatch):
    """Every test sees an empty user profile directory unless it writes one."""
    directory = tmp_path / "user-profiles"
    monkeypatch.setenv(PROFILE_DIR_ENV, str(directory))
    return directory


def measured_profile(name: str, family: str = "H100", *, provenance: str = "measured", created="2026-11-01"):
    device_names = {"H100": "NVIDIA H100 80GB HBM3", "H200": "NVIDIA H200"}
    device_names.setdefault(family, family)  # a GPU the roofline lacks is its own family
    return Profile(
        name=name,
        provenance=provenance,
        source="test",
        created=created,
        device=DeviceInfo(name=device_names[family], family=family, compute_capability=(9, 0)),
        software={"torch": "2.11.0"},
        method="test",
        recipes={
            "tensorwise": RecipeProfile(
                points=(SpeedupPoint(1024, 1024, 1024, 0.5, 1e-4, 2e-4), SpeedupPoint(4096, 4096, 4096, 1.5)),
                model={"kind": "log-linear-interpolation"},
            )
        },
    )


# ------------------------------------------------------------------------------------------------ format


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profiles_load_and_round_trip_byte_for_byte(name):
    profile = load_profile(name)
    assert profile.name == name
    assert profile.path == PROFILES_DIR / f"{name}.json"
    assert dumps_profile(Profile.from_json(json.loads(dumps_profile(profile)))) == profile.path.read_text()


def test_shipped_profiles_are_what_the_script_writes():
    """data/profiles/ is reproducible: regenerating gives identical bytes (run the script if this fails)."""
    texts = load_benchmark("make_shipped_profiles").shipped_profiles()
    assert set(texts) == {f"{name}.json" for name in SHIPPED}
    for file_name, text in texts.items():
        assert (PROFILES_DIR / file_name).read_text(encoding="utf-8") == text, file_name


def test_published_profile_metadata():
    profile = load_profile("h100-published-rowwise-2025-06")
    assert profile.provenance == "published"
    assert "docs/static/fp8-rowwise-perf.png" in profile.source and "2.8.0a0" in profile.source
    assert "torch.profiler" in profile.method and "LNLinearSigmoid" in profile.method
    assert profile.device.family == "H100" and profile.device.compute_capability == (9, 0)
    assert profile.covers("rowwise") and not profile.covers("tensorwise")
    body = profile.recipe("rowwise")
    assert len(body.points) == 216 and body.error is not None and body.error.n == 216


@pytest.mark.parametrize("family", ["H100", "H200", "B200"])
def test_modelled_profiles_cover_every_recipe(family):
    profile = load_profile(f"{family.lower()}-roofline")
    assert profile.provenance == "modelled" and profile.family == family
    assert all(profile.covers(recipe) for recipe in ("tensorwise", "rowwise", "rowwise_with_gw_hp"))
    assert profile.roofline is not None and profile.roofline.bf16_flops > 0


def test_save_is_deterministic_sorted_with_trailing_newline(tmp_path):
    profile = measured_profile("mine")
    first = save_profile(profile, tmp_path / "a.json").read_bytes()
    second = save_profile(load_profile(tmp_path / "a.json"), tmp_path / "b.json").read_bytes()
    assert first == second
    assert first.endswith(b"}\n")
    data = json.loads(first)
    assert list(data) == sorted(data)
    assert data["schema"] == "fp8advisor.profile/1"
    assert data["recipes"]["tensorwise"]["points"][0] == {
        "K": 1024,
        "M": 1024,
        "N": 1024,
        "speedup": 0.5,
        "bf16_time_s": 1e-4,
        "float8_time_s": 2e-4,
    }


def _broken(mutate) -> dict:
    data = measured_profile("broken").to_json()
    mutate(data)
    return data


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(schema="fp8advisor.profile/0"), "schema"),
        (lambda d: d.pop("recipes"), "lacks recipes"),
        (lambda d: d.update(provenance="guessed"), "provenance"),
        (lambda d: d["recipes"].update(fp4={"points": []}), "unknown recipe"),
        (lambda d: d["recipes"]["tensorwise"]["points"][0].update(speedup=-1), "not positive"),
        (lambda d: d["recipes"]["tensorwise"]["points"][0].pop("M"), "malformed"),
        (lambda d: d["recipes"]["tensorwise"].update(points=[]), "neither measured points nor roofline"),
        (
            lambda d: d["recipes"]["tensorwise"]["points"].append(d["recipes"]["tensorwise"]["points"][0]),
            "twice",
        ),
    ],
)
def test_invalid_profiles_are_refused_with_a_hint(mutate, message, tmp_path):
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(_broken(mutate)))
    with pytest.raises(ProfileError, match=message) as error:
        load_profile(path)
    assert error.value.hint
    assert error.value.location == str(path)


def test_not_json_names_the_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{\n  oops\n}")
    with pytest.raises(ProfileError, match="line 2"):
        load_profile(path)


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ProfileError, match="no profile named") as error:
        load_profile("a100-nonexistent")
    assert "h100-roofline" in error.value.hint


def test_missing_path_is_a_profile_error(tmp_path):
    with pytest.raises(ProfileError, match="no profile file"):
        load_profile(tmp_path / "missing.json")


def test_list_profiles_includes_user_profiles(empty_user_dir):
    save_profile(measured_profile("mine"), empty_user_dir / "mine.json")
    names = [profile.name for profile in list_profiles()]
    assert names[-1] == "mine" and set(SHIPPED) <= set(names)
    assert user_profile_dir() == empty_user_dir


def test_user_profile_shadows_a_shipped_name(empty_user_dir):
    save_profile(
        dataclasses.replace(measured_profile("h100-roofline")), empty_user_dir / "h100-roofline.json"
    )
    assert load_profile("h100-roofline").provenance == "measured"


# --------------------------------------------------------------------------------------------- selection

# (user profiles on disk as (name, family, provenance, created), device, chosen, fallback, reason words)
SELECTION = [
    # no GPU: the shipped H100 profile (the one the evidence chose), with the H100 roofline beside it
    ([], None, "h100-evidence", "h100-roofline", "no GPU found"),
    # the shipped profile of this GPU type: the evidence profile before the measured, published, modelled ones
    ([], "NVIDIA H100 80GB HBM3", "h100-evidence", "h100-roofline", "shipped profile for"),
    ([], "NVIDIA H200", "h200-evidence", "h200-roofline", "shipped profile for"),
    ([], "NVIDIA B200", "b200-evidence", "b200-roofline", "shipped profile for"),
    # a GPU type with no shipped profile: the H100 one
    (
        [],
        "NVIDIA RTX 6000 Ada Generation",
        "h100-evidence",
        "h100-roofline",
        "no profile for",
    ),
    # the user's own profile of this GPU type comes first
    ([("mine", "H100", "measured", "2026-11-01")], "NVIDIA H100 PCIe", "mine", "h100-roofline", "your own"),
    ([("mine", "H200", "measured", "2026-11-01")], "NVIDIA H200", "mine", "h200-roofline", "your own"),
    # a GPU type the roofline lacks: the user's profile of it still comes first
    (
        [("ada", "NVIDIA RTX 6000 Ada Generation", "measured", "2026-11-01")],
        "NVIDIA RTX 6000 Ada Generation",
        "ada",
        None,
        "your own",
    ),
    # the newest of several, and measured before published
    (
        [("old", "H100", "measured", "2026-01-01"), ("new", "H100", "measured", "2026-11-01")],
        "NVIDIA H100 80GB HBM3",
        "new",
        "h100-roofline",
        "your own",
    ),
    (
        [("table", "H100", "published", "2026-12-01"), ("run", "H100", "measured", "2026-11-01")],
        "NVIDIA H100 80GB HBM3",
        "run",
        "h100-roofline",
        "your own",
    ),
    # a user profile of another GPU type is not used
    (
        [("mine", "H100", "measured", "2026-11-01")],
        "NVIDIA H200",
        "h200-evidence",
        "h200-roofline",
        "shipped profile for",
    ),
    # emulated profiles are never selected
    (
        [("emu", "H100", "emulated", "2026-11-01")],
        "NVIDIA H100 80GB HBM3",
        "h100-evidence",
        "h100-roofline",
        "shipped",
    ),
]


@pytest.mark.parametrize(("user", "device_name", "chosen", "fallback", "reason"), SELECTION)
def test_selection_order(user, device_name, chosen, fallback, reason, empty_user_dir):
    for name, family, provenance, created in user:
        profile = measured_profile(name, family, provenance=provenance, created=created)
        save_profile(profile, empty_user_dir / f"{name}.json")
    choice = select_profile(device_name=device_name, detect_device=False)
    assert choice.name == chosen
    assert (choice.fallback.name if choice.fallback else None) == fallback
    assert reason in choice.reason
    assert chosen in choice.describe()


def test_requested_profile_wins_by_name_or_path(tmp_path):
    choice = select_profile("h200-roofline", device_name="NVIDIA H100 80GB HBM3")
    assert choice.name == "h200-roofline" and choice.fallback is None and "requested" in choice.reason
    path = save_profile(measured_profile("elsewhere", "H200"), tmp_path / "x" / "elsewhere.json")
    choice = select_profile(str(path))
    assert choice.path == path and choice.fallback.name == "h200-roofline"


def test_choice_answers_uncovered_recipes_from_the_fallback():
    choice = select_profile("h100-published-rowwise-2025-06", device_name="NVIDIA H100 80GB HBM3")
    assert choice.profile_for("rowwise").name == "h100-published-rowwise-2025-06"
    assert choice.profile_for("tensorwise").name == "h100-roofline"
    assert choice.covers("rowwise_with_gw_hp") and not choice.primary.covers("rowwise_with_gw_hp")


@pytest.mark.parametrize("device_name", [None, "NVIDIA H100 80GB HBM3"])
def test_a_shipped_measured_profile_beats_the_published_one_of_the_same_date(
    device_name, tmp_path, monkeypatch
):
    # Issue 5: the measured H100 profile becomes the default for an H100 and for a machine without a GPU,
    # even when it was made the same day as the published one (whose name sorts after it).
    import shutil

    import fp8advisor.predict.profile_files as profile_module

    shipped = tmp_path / "shipped"
    shutil.copytree(PROFILES_DIR, shipped)
    evidence = shipped / "h100-evidence.json"
    evidence.rename(tmp_path / evidence.name)  # the evidence profile, which comes first, set aside
    published = load_profile("h100-published-rowwise-2025-06")
    measured = measured_profile("h100-measured-rowwise-2026-11-22", created=published.created)
    save_profile(measured, shipped / f"{measured.name}.json")
    monkeypatch.setattr(profile_module, "PROFILES_DIR", shipped)
    choice = select_profile(device_name=device_name, detect_device=False)
    assert choice.name == "h100-measured-rowwise-2026-11-22" and choice.fallback.name == "h100-roofline"
    # with the evidence profile shipped beside them, it comes first (it is fitted to both)
    (tmp_path / "h100-evidence.json").rename(shipped / "h100-evidence.json")
    assert select_profile(device_name=device_name, detect_device=False).name == "h100-evidence"
