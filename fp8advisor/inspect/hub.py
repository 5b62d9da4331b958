"""Hugging Face Hub ids as targets: `org/name` (or `org/name@revision`) names the model's config.json.

Only `config.json` is ever requested, through `huggingface_hub.hf_hub_download`, which keeps the local cache
(`HF_HUB_CACHE`, `HF_HOME`), answers from it when offline (`HF_HUB_OFFLINE=1`) and sends the token of
`hf auth login` or `HF_TOKEN` for gated and private repos: never the weights. Each way the fetch can fail
becomes one `TargetError` that says what to do.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fp8advisor.errors import TargetError, quote

CONFIG_NAME = "config.json"

# `org/name` as the Hub spells repo ids (word characters, '-', '.'; at most 96 per part), then an optional
# `@revision` (a branch, tag or commit). No ':' anywhere: `prefix:...` forms are other kinds of target.
_HUB_ID = re.compile(
    r"^(?P<repo>[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95})(?:@(?P<revision>[\w.][\w./-]{0,199}))?$"
)


def parse_hub_id(text: str) -> tuple[str, str | None] | None:
    """(repo id, revision or None) when `text` is written like a Hub id, else None. Only the form is
    checked: whether the repo exists is the Hub's answer (`fetch_config`)."""
    match = _HUB_ID.match(text)
    if match is None or ".." in text or "--" in match.group("repo"):
        return None  # the Hub refuses '--' and '..' in ids; such a text is a path
    return match.group("repo"), match.group("revision")


def fetch_config(repo_id: str, revision: str | None = None) -> Path:
    """The local path of the repo's config.json: from the cache, else downloaded (that file alone)."""
    download, failures = _hub_download(repo_id, revision)
    try:
        return Path(download(repo_id, CONFIG_NAME, revision=revision))
    except failures.caught as error:
        raise _fetch_error(error, failures, repo_id, revision) from None


@dataclass(frozen=True)
class _HubFailures:
    """The huggingface_hub errors `fetch_config` explains, in the order it tries them (a subclass first)."""

    gated: type[Exception]
    repository: type[Exception]
    revision: type[Exception]
    local_entry: type[Exception]
    remote_entry: type[Exception]
    http: type[Exception]
    validation: type[Exception]
    offline: type[Exception]  # the cause of a LocalEntryNotFoundError when offline mode is on

    @property
    def caught(self) -> tuple[type[Exception], ...]:
        return (
            self.gated,
            self.repository,
            self.revision,
            self.local_entry,
            self.remote_entry,
            self.http,
            self.validation,
            OSError,
        )


def _hub_download(repo_id: str, revision: str | None) -> tuple[Callable[..., str], _HubFailures]:
    """huggingface_hub's `hf_hub_download` and its errors; a `TargetError` without the package."""
    try:
        from huggingface_hub import errors, hf_hub_download
        from huggingface_hub.errors import (
            GatedRepoError,
            HfHubHTTPError,
            HFValidationError,
            LocalEntryNotFoundError,
            OfflineModeIsEnabled,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError:
        raise TargetError(
            f"no local path {quote(repo_id if revision is None else f'{repo_id}@{revision}')}; as a Hugging "
            "Face Hub id it needs the huggingface_hub package",
            hint="check the path, or pip install 'fp8advisor[hf]' for a Hub id",
        ) from None
    # huggingface_hub < 1.0 has no RemoteEntryNotFoundError: its EntryNotFoundError is the remote one there.
    remote_entry = getattr(errors, "RemoteEntryNotFoundError", errors.EntryNotFoundError)
    failures = _HubFailures(
        gated=GatedRepoError,
        repository=RepositoryNotFoundError,
        revision=RevisionNotFoundError,
        local_entry=LocalEntryNotFoundError,
        remote_entry=remote_entry,
        http=HfHubHTTPError,
        validation=HFValidationError,
        offline=OfflineModeIsEnabled,
    )
    return hf_hub_download, failures


def _fetch_error(error: Exception, failures: _HubFailures, repo_id: str, revision: str | None) -> TargetError:
    """What to say of a failed download of the repo's config.json: what went wrong and what to do."""
    from huggingface_hub import constants

    name = repo_id if revision is None else f"{repo_id}@{revision}"
    page = f"{constants.ENDPOINT}/{repo_id}"
    if isinstance(error, failures.gated):  # before RepositoryNotFoundError, its base class
        return TargetError(
            f"{name} is a gated model on the Hugging Face Hub and this machine has no access to it",
            hint=f"accept its licence on {page}, then log in with `hf auth login` or set HF_TOKEN "
            "to a token of that account",
        )
    if isinstance(error, failures.repository):
        return TargetError(
            f"no local path {quote(name)} and no model {repo_id} on the Hugging Face Hub",
            hint="check the path, or the id on huggingface.co (org/name); for a private model, log in "
            "with `hf auth login` or set HF_TOKEN",
        )
    if isinstance(error, failures.revision):
        return TargetError(
            f"the Hugging Face model {repo_id} has no revision {quote(revision)}",
            hint=f"give a branch, tag or commit listed on {page}/tree/main, or leave out @revision",
        )
    if isinstance(error, failures.local_entry):  # not cached, the Hub not asked (before the remote one)
        return _not_cached_error(error, failures, repo_id, name)
    if isinstance(error, failures.remote_entry):
        return TargetError(
            f"the Hugging Face model {name} has no {CONFIG_NAME}",
            hint="only repos holding a transformers config.json can be read; download its model code "
            "and give model.py instead",
        )
    if isinstance(error, failures.http):
        status = getattr(getattr(error, "response", None), "status_code", None)
        if status in (401, 403):
            return TargetError(
                f"the Hugging Face Hub refused {name} (HTTP {status}): not authorised",
                hint=f"log in with `hf auth login` or set HF_TOKEN, and accept the model's licence on {page}",
            )
        return TargetError(
            f"the Hugging Face Hub failed to send {name}'s {CONFIG_NAME}: {_first_line(error)}",
            hint="try again later; check HF_ENDPOINT and the network",
        )
    if isinstance(error, failures.validation):
        return TargetError(
            f"{quote(name)} is not a valid Hugging Face Hub id: {_first_line(error)}",
            hint="write org/name or org/name@revision",
        )
    # OSError: the cache folder cannot be written, a connection reset while reading...
    return TargetError(
        f"fetching {name}'s {CONFIG_NAME} failed: {type(error).__name__}: {_first_line(error)}",
        hint="check the network and that the Hugging Face cache folder (HF_HOME) is writable",
    )


def _not_cached_error(error: Exception, failures: _HubFailures, repo_id: str, name: str) -> TargetError:
    """The config is not in the local cache and the Hub was not asked: offline mode, or no network."""
    from huggingface_hub import constants

    if isinstance(error.__cause__, failures.offline) or constants.HF_HUB_OFFLINE:
        return TargetError(
            f"no local path {quote(name)}, and HF_HUB_OFFLINE is set while the Hub model's "
            f"{CONFIG_NAME} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE})",
            hint="unset HF_HUB_OFFLINE (and TRANSFORMERS_OFFLINE) to download it, or fetch it first "
            f"where there is a network: `hf download {repo_id} {CONFIG_NAME}`; or check the path",
        )
    return TargetError(
        f"no local path {quote(name)}, and the Hugging Face Hub cannot be reached to fetch its "
        f"{CONFIG_NAME}, which is not in the local cache: {_cause(error)}",
        hint="check the network (or HF_ENDPOINT, HTTPS_PROXY), or fetch it where there is one: "
        f"`hf download {repo_id} {CONFIG_NAME}`; or check the path",
    )


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def _cause(error: BaseException) -> str:
    """What the Hub call itself raised (a connection error), which huggingface_hub chains as the cause."""
    cause = error.__cause__ or error
    return f"{type(cause).__name__}: {_first_line(cause)}"
