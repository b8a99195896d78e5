"""Container runtime plug-ins: one module each, found by `iri_gateway.plugins.discover`.

`RUNTIMES` is the registry every other part reads; see `registry.py`, and docs/plugins.md for
adding a runtime (one module here, one template in `templates/runtimes/`).
"""

from __future__ import annotations

import sys

from iri_gateway.plugins import discover
from iri_gateway.runtimes.base import Invocation, Runtime
from iri_gateway.runtimes.registry import RuntimeRegistry


def _discovered() -> list[Runtime]:
    """Every module's `RUNTIME`; one that is not a Runtime stops the gateway from starting."""
    runtimes: list[Runtime] = []
    for module, plugin in discover(sys.modules[__name__], "RUNTIME"):
        if not isinstance(plugin, Runtime):
            raise TypeError(f"{module}.RUNTIME is not a Runtime: {plugin!r}")
        runtimes.append(plugin)
    return runtimes


RUNTIMES = RuntimeRegistry(_discovered())

__all__ = ["RUNTIMES", "Invocation", "Runtime", "RuntimeRegistry"]
