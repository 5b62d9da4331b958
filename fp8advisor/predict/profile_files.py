"""Profile files: where profiles live (shipped in `data/profiles/`, the user's own in `user_profile_dir()`),
reading and writing them, listing them, and loading one by name or path.

A profile file is the JSON document of `fp8advisor.predict.profile` (`dumps_profile`); reading one validates
it (`Profile.from_json`), and a file that cannot be read says why and where (`ProfileError`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from fp8advisor.errors import ProfileError
from fp8advisor.paths import PROFILES_DIR
from fp8advisor.predict.profile import SCHEMA, Profile, dumps_profile

#: Environment variable naming the directory of the user's own profiles (default:
#: ~/.cache/fp8advisor/profiles).
PROFILE_DIR_ENV = "FP8ADVISOR_PROFILE_DIR"


def user_profile_dir() -> Path:
    """The directory `fit` writes to by default and `select_profile` looks in first."""
    configured = os.environ.get(PROFILE_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "fp8advisor" / "profiles"


def shipped_profile_dir() -> Path:
    """The directory of the profiles shipped with fp8advisor (`data/profiles/`)."""
    return PROFILES_DIR


def save_profile(profile: Profile, path: str | Path) -> Path:
    """Write the profile (atomically: a temporary file renamed into place) and return the path."""
    from fp8advisor.files import write_atomic

    return write_atomic(path, dumps_profile(profile))


def looks_like_profile(path: Path) -> bool:
    """True when the file at `path` is a JSON object with the profile schema (`SCHEMA`): a file `fit -o` may
    replace."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(data, dict) and data.get("schema") == SCHEMA


def read_profile_file(path: Path) -> Profile:
    """The profile in the file at `path`; a ProfileError says why it cannot be read or what is wrong."""
    hint = "profiles are JSON documents written by `fp8advisor fit`"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ProfileError(
            f"cannot read profile: {error.strerror or error}", hint="check the path", location=str(path)
        ) from None
    except UnicodeDecodeError:
        raise ProfileError("not a text file (binary or pickled?)", hint=hint, location=str(path)) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ProfileError(
            f"not valid JSON: {error.msg} at line {error.lineno}", hint=hint, location=str(path)
        ) from None
    except RecursionError:
        raise ProfileError("not a profile: JSON nested too deeply", hint=hint, location=str(path)) from None
    return Profile.from_json(data, path=path)


def profiles_in(directory: Path, passed_over: list[str] | None = None) -> list[Profile]:
    """The profiles in `directory` (its `*.json` files, by name). With a `passed_over` list, a file that is
    not a readable profile is named there ("file: why") and skipped; without one it is a `ProfileError`."""
    if not directory.is_dir():
        return []
    profiles = []
    for path in sorted(directory.glob("*.json")):
        try:
            profiles.append(read_profile_file(path))
        except ProfileError as error:
            if passed_over is None:
                raise
            passed_over.append(f"{path}: {error.message}")
    return profiles


def list_profiles(*, include_user: bool = True) -> list[Profile]:
    """Every shipped profile, then the user's own (from `user_profile_dir()`), each sorted by file name."""
    profiles = profiles_in(shipped_profile_dir())
    if include_user:
        profiles += profiles_in(user_profile_dir())
    return profiles


def load_profile(name_or_path: str | Path) -> Profile:
    """A profile by path, or by name (a user profile of that name first, then a shipped one)."""
    candidate = Path(name_or_path).expanduser()
    looks_like_path = candidate.suffix == ".json" or os.sep in str(name_or_path) or candidate.is_file()
    if looks_like_path:
        if not candidate.is_file():
            raise ProfileError(
                f"no profile file {str(name_or_path)!r}",
                hint="give a path to a profile JSON, or a name from `fp8advisor fit` / data/profiles",
            )
        return read_profile_file(candidate)
    for directory in (user_profile_dir(), shipped_profile_dir()):
        path = directory / f"{name_or_path}.json"
        if path.is_file():
            return read_profile_file(path)
    known = sorted(
        {
            path.stem
            for directory in (user_profile_dir(), shipped_profile_dir())
            for path in directory.glob("*.json")
        }
    )
    raise ProfileError(f"no profile named {str(name_or_path)!r}", hint=f"known profiles: {', '.join(known)}")


__all__ = [
    "PROFILE_DIR_ENV",
    "list_profiles",
    "load_profile",
    "looks_like_profile",
    "save_profile",
    "shipped_profile_dir",
    "user_profile_dir",
]
