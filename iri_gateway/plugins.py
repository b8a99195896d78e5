"""Finding the plug-ins of one axis (container runtimes, schedulers) without a list of them.

A plug-in is a module, or a sub-package, of its axis's package that defines the axis's
attribute: `RUNTIME` in `iri_gateway/runtimes/`, `SCHEDULER` in `iri_gateway/schedulers/`.
Adding one is adding that module; nothing else names it, so nothing else can be forgotten.
Modules of the package that define no such attribute are the axis's shared code (its
contract and helpers, e.g. `runtimes/base.py`).

A module that fails to import fails discovery, and with it the start of the gateway: a
broken plug-in is never a silently missing feature.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def discover(package: ModuleType, attribute: str) -> list[tuple[str, object]]:
    """(module name, its `attribute`) for every module of `package` that defines one, in
    module-name order. The registry of the axis checks each is what it should be."""
    found: list[tuple[str, object]] = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        if hasattr(module, attribute):
            found.append((module.__name__, getattr(module, attribute)))
    return found
