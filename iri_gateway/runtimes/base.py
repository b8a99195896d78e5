"""The contract every container runtime module fulfils.

A runtime module knows its own command line: which image forms it can run and how to turn a
`Decision` into the options, image reference and command that its template fragment lays out.
Adding a runtime means one module here and one fragment in `templates/runtimes/`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from iri_gateway.models.profile import ImageForm
from iri_gateway.planning.images import ImageRef
from iri_gateway.shell import SiteWord

if TYPE_CHECKING:
    from iri_gateway.models.plan import Decision


@dataclass(frozen=True)
class Invocation:
    """What a runtime fragment needs to write the launch line."""

    executable: SiteWord
    options: list[str]
    image: str | None
    command: list[str]
    container_env: dict[str, str] = field(default_factory=dict)
    scheduler_options: list[tuple[str, str]] = field(default_factory=list)


class Runtime(Protocol):
    """A container runtime plug-in."""

    name: str
    image_forms: frozenset[ImageForm]
    supports_network_none: bool
    supports_cdi: bool

    def image_reference(self, ref: ImageRef) -> str | None:
        """The image in this runtime's own form, or None when it cannot run that form."""

    def invocation(self, decision: Decision) -> Invocation:
        """Options, image and command for the launch line."""


def site_words(words: list[str]) -> list[str]:
    """Mark profile strings as site words (double-quoted, `$VAR` expands)."""
    return [SiteWord(word) for word in words]


def executable_of(decision: Decision, default: str) -> SiteWord:
    """The runtime's program: the profile's `executable`, else its usual name."""
    config = decision.runtime_config
    return SiteWord(config.executable if config and config.executable else default)


def command_of(decision: Decision) -> list[str]:
    """The user's executable and arguments (empty: the image's own entrypoint)."""
    spec = decision.spec
    if spec.executable is None:
        return list(spec.arguments)
    return [spec.executable, *spec.arguments]


def site_flags(decision: Decision) -> list[str]:
    """Flags the profile puts on every launch, then GPU and MPI binding flags, then binds."""
    config = decision.runtime_config
    if config is None:
        return []
    flags: list[str] = site_words(config.flags)
    flags += decision.gpu_flags
    if decision.use_mpi and config.mpi is not None:
        mpi = config.mpi
        chosen = mpi.gpu_flags if decision.use_gpu and mpi.gpu_flags is not None else mpi.flags
        flags += site_words(chosen)
    return flags


def site_binds(decision: Decision) -> list[str]:
    """Bind paths the site always adds, MPI binds when MPI is used, and the gateway's own
    (a cluster member's hosts file)."""
    config = decision.runtime_config
    if config is None:
        return []
    binds = list(config.binds)
    if decision.use_mpi and config.mpi is not None:
        binds += config.mpi.binds
    return site_words(binds) + list(decision.binds)
