"""Container runtime plug-ins, one module each, looked up by name."""

from __future__ import annotations

from typing import cast

from iri_gateway.runtimes import apptainer, none, podman, podman_hpc, shifter
from iri_gateway.runtimes.base import Invocation, Runtime

RUNTIMES: dict[str, Runtime] = {
    module.name: cast(Runtime, module)
    for module in (apptainer, podman_hpc, shifter, podman, none)
}

__all__ = ["RUNTIMES", "Invocation", "Runtime"]
