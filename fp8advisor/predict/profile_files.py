"""Profile files: where profiles live (shipped in `data/profiles/`, the user's own in `user_profile_dir()`),
reading and writing them, listing them, and loading one by name or path.

A profile file is the JSON document of `fp8advisor.predict.profile` (`dumps_profile`, which writes only
what it can read back); reading one goes through `fp8advisor.reading` (a regular file of bounded size,
UTF-8, JSON of bounded depth) and checks every field (`Profile.from_json`); a file that cannot be read says
why and where (`ProfileError`). A file the user names (`load_profile`) that is bad is an error; in a
directory scan (`profiles_in`) a bad file is named in a `passed_over` list and skipped, for the caller to
say once.

Names: what `fit` writes is a plain name (`profile_path_for`, `fields.name_problem`: letters, digits and
`._+-`); what is read, a profile's `name` field and a `--profile NAME` looked up in a profile directory
(`load_profile`), is any safe name (`fields.read_name_problem`: printable, bounded, no path separator, not
`.`/`..`, not starting with `-`), so that profiles named by older versions (`my h100 (table)`) still read
and `<name>.json` stays inside its directory.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from fp8advisor.errors import ProfileError, quote
from fp8advisor.fields import name_problem, read_name_problem
from fp8advisor.paths import PROFILES_DIR
from fp8advisor.predict.profile import SCHEMA, Profile, dumps_profile
from fp8advisor.reading import MAX_INPUT_BYTES, check_regular_file, decode_text, parse_json, read_text

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
    replace. Read without noting it as an input (it is the output), and only when it is a regular file of a
    bounded size (`reading.check_regular_file`)."""
    try:
        check_regular_file(path, "profile", error=ProfileError)
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a pipe swapped in: no wait
        with os.fdopen(descriptor, "rb") as handle:
            text = decode_text(handle.read(MAX_INPUT_BYTES), path, "profile", error=ProfileError)
        data = parse_json(text, path, error=ProfileError)
    except (OSError, ProfileError):
        return False
    return isinstance(data, dict) and data.get("schema") == SCHEMA


def read_profile_file(path: Path) -> Profile:
    """The profile in the file at `path`; a ProfileError says why it cannot be read or what is wrong (the
    file through `fp8advisor.reading`: a regular file of bounded size, UTF-8, JSON of bounded depth; then
    every field, `Profile.from_json`)."""
    hint = "profiles are JSON documents written by `fp8advisor fit`"
    text = read_text(path, "profile", error=ProfileError, hint=hint)
    data = parse_json(text, path, error=ProfileError)
    return Profile.from_json(data, path=path)


def profiles_in(directory: Path, passed_over: list[str] | None = None) -> list[Profile]:
    """The profiles in `directory` (its `*.json` files, by name). With a `passed_over` list, a file that is
    not a readable profile is named there ("file: why", once however many scans meet it) and skipped;
    without one it is a `ProfileError`."""
    if not directory.is_dir():
        return []
    profiles = []
    for path in sorted(directory.glob("*.json")):
        try:
            profiles.append(read_profile_file(path))
        except ProfileError as error:
            if passed_over is None:
                raise
            why = f"{path}: {error.message}"
            if why not in passed_over:
                passed_over.append(why)
    return profiles


def list_profiles(*, include_user: bool = True, passed_over: list[str] | None = None) -> list[Profile]:
    """Every shipped profile, then the user's own (from `user_profile_dir()`), each sorted by file name. A
    file that is not a readable profile is a `ProfileError`, or with a `passed_over` list named there and
    skipped (`profiles_in`)."""
    profiles = profiles_in(shipped_profile_dir(), passed_over)
    if include_user:
        profiles += profiles_in(user_profile_dir(), passed_over)
    return profiles


def load_profile(name_or_path: str | Path) -> Profile:
    """A profile by path, or by name (a user profile of that name first, then a shipped one; any safe name,
    `fields.read_name_problem`, not only a plain one). A file named this way is an error when it is not a
    readable profile (a directory scan passes over such a file)."""
    text = str(name_or_path)
    candidate = Path(name_or_path).expanduser()
    if (
        candidate.suffix == ".json"
        or os.sep in text
        or (os.altsep and os.altsep in text)
        or os.path.exists(candidate)  # False, not an error, for a name too long or holding a NUL
    ):
        if not os.path.lexists(candidate):
            raise ProfileError(
                f"no profile file {quote(text)}",
                hint="give a path to a profile JSON, or a name from `fp8advisor fit` / data/profiles",
            )
        return read_profile_file(candidate)
    problem = read_name_problem(text, "a profile name")  # a safe name: <name>.json stays in its directory
    if problem is not None:
        raise ProfileError(
            f"no profile named {quote(text)}: {problem}",
            hint="give the name of a profile (`fp8advisor fit --name`), or the path of its JSON file",
        )
    for directory in (user_profile_dir(), shipped_profile_dir()):
        path = directory / f"{text}.json"
        if os.path.exists(path):  # a safe name may still be too long for a file name: not found
            return read_profile_file(path)
    known = sorted(
        {
            shlex.quote(path.stem)  # as --profile takes it; a file name no --profile takes is not listed
            for directory in (user_profile_dir(), shipped_profile_dir())
            if directory.is_dir()
            for path in directory.glob("*.json")
            if read_name_problem(path.stem) is None
        }
    )
    raise ProfileError(f"no profile named {quote(text)}", hint=f"known profiles: {', '.join(known)}")


def profile_path_for(name: str, directory: Path | None = None) -> Path:
    """Where `fit` writes the profile `name` by default: `<directory or user_profile_dir()>/<name>.json`;
    a name that is not a plain name (`fields.name_problem`: a space, a path separator, `..`, a control
    character) is a `ProfileError`, so the file is always inside that directory and has a plain name."""
    problem = name_problem(name, "the profile name")
    if problem is not None:
        raise ProfileError(
            problem,
            hint="name it with letters, digits and . _ + -, starting with a letter or a digit (--name NAME)",
        )
    return (directory or user_profile_dir()) / f"{name}.json"


__all__ = [
    "PROFILE_DIR_ENV",
    "list_profiles",
    "load_profile",
    "looks_like_profile",
    "profile_path_for",
    "profiles_in",
    "read_profile_file",
    "save_profile",
    "shipped_profile_dir",
    "user_profile_dir",
]
