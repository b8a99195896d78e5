"""Batch-system plug-ins: one package each, found by `iri_gateway.plugins.discover`, chosen by
the profile's `scheduler.kind` from `SCHEDULERS` (see docs/plugins.md)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import get_args

from iri_gateway.models.scheduler_kinds import SchedulerKind
from iri_gateway.plugins import discover
from iri_gateway.schedulers.base import SchedulerPlugin


def registry(found: Iterable[tuple[str, object]]) -> Mapping[str, SchedulerPlugin]:
    """The plug-ins `discover` found, by kind. A plug-in that is not a SchedulerPlugin or a
    kind found twice stops the gateway."""
    plugins: dict[str, SchedulerPlugin] = {}
    for module, plugin in found:
        if not isinstance(plugin, SchedulerPlugin):
            raise TypeError(f"{module}.SCHEDULER is not a SchedulerPlugin: {plugin!r}")
        if plugin.kind in plugins:
            raise ValueError(f"scheduler kind {plugin.kind!r} is registered twice ({module})")
        plugins[plugin.kind] = plugin
    return MappingProxyType(plugins)


def _discovered() -> Mapping[str, SchedulerPlugin]:
    """Every package's `SCHEDULER` by kind; kinds that differ from those the profile's
    schema documents stop the gateway."""
    found = registry(discover(sys.modules[__name__], "SCHEDULER"))
    accepted = set(get_args(SchedulerKind))
    if set(found) != accepted:
        raise RuntimeError(
            f"scheduler plug-ins ({', '.join(sorted(found))}) and the kinds a profile accepts "
            "(SchedulerKind in iri_gateway/models/scheduler_kinds.py: "
            f"{', '.join(sorted(accepted))}) differ"
        )
    return found


SCHEDULERS = _discovered()

__all__ = ["SCHEDULERS", "SchedulerPlugin", "registry"]
