"""Podman-HPC (NERSC): podman's command line plus site module flags (`--gpu`, `--mpi`, ...).

The module flags come from the profile's GPU and MPI bindings; everything else passes through
to podman unchanged, so the command line is podman's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from iri_gateway.models.profile import ImageForm
from iri_gateway.planning import images
from iri_gateway.planning.images import ImageRef
from iri_gateway.runtimes.base import Invocation
from iri_gateway.runtimes.podman import podman_invocation

if TYPE_CHECKING:
    from iri_gateway.models.plan import Decision

name = "podman-hpc"
image_forms: frozenset[ImageForm] = frozenset({"oci", "docker-uri", "shifter"})
supports_network_none = True
supports_cdi = False


def image_reference(ref: ImageRef) -> str | None:
    return images.for_podman(ref)


def invocation(decision: Decision) -> Invocation:
    return podman_invocation(decision, "podman-hpc")
