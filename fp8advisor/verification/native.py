"""What the framework that reads a config file converted, run with its own code: the records.

`verify` reads a config with fp8advisor's readers (`fp8advisor.frameworks.reader`) and converts the model with
torchao's swap and the framework's filter as those readers understand it: a simulation of the framework. Where
the framework itself is installed, it also runs the framework's own loader and converter on the model
(`fp8advisor.verification.framework_check`, one module per framework: `native_torchtitan`, `native_torchao`,
`native_megatron`), which return a `NativeConversion`, or a `NotRun` saying why it could not run (then the
check is a simulation).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata


@dataclass(frozen=True)
class NativeConversion:
    """What the framework's own code converted."""

    framework: str  # the framework and its installed version, e.g. "torchtitan 0.3.0"
    #: FQNs (in the names of the model `verify` built from the target) of the Linear layers it converted
    linear_fqns: frozenset[str]
    #: modules whose grouped experts (3-D weights) it converted; None when the format cannot convert experts
    expert_modules: frozenset[str] | None = None
    notes: tuple[str, ...] = ()  # what the user should know about the run (a check lifted, a warning it gave)
    #: how the model the file trains differs from the one `verify` built from the target ("": the same)
    other_model: str = ""


@dataclass(frozen=True)
class NotRun:
    """Why the framework's own conversion did not run: `verify`'s check of this file is a simulation."""

    framework: str  # the framework the file is for, e.g. "NeMo AutoModel"
    reason: str  # e.g. "not installed (pip install nemo-automodel)"

    def note(self) -> str:
        return f"simulated: {self.framework}'s own conversion did not run ({self.reason})"


def installed_version(distribution: str) -> str | None:
    """The installed version of a distribution (package metadata, the first on sys.path: nothing imported),
    None when absent."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


__all__ = ["NativeConversion", "NotRun", "installed_version"]
