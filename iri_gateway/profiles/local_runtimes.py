"""Resources run by the `local` scheduler use this machine: offer only runtimes it has.

The embedded `local` profile names Podman; on a machine without it, the gateway runs jobs
without containers rather than failing each one at run time (docs/design.md Contract 4: "Podman
when present, else no container"). What was dropped is returned, so `serve` can say so. Each
runtime says how it is detected (`Runtime.installed`: by default, its program on PATH).
"""

from __future__ import annotations

import shutil
from dataclasses import replace

from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.runtimes import RUNTIMES
from iri_gateway.runtimes.base import Which


def installed_only(
    loaded: LoadedResource, which: Which = shutil.which
) -> tuple[LoadedResource, list[str]]:
    """`loaded` without the runtimes whose program is missing here (only for a scheduler that
    runs jobs on this machine)."""
    resource = loaded.resource
    if not resource.scheduler.facts.this_machine:
        return loaded, []
    runtimes = resource.runtimes
    missing: list[str] = [
        name
        for name in runtimes.available()
        if (config := runtimes.get(name)) is not None
        and not RUNTIMES[name].installed(config, which)
    ]
    if not missing:
        return loaded, []
    trimmed = resource.model_copy(update={"runtimes": runtimes.without(missing)})
    return replace(loaded, resource=trimmed), missing


def registry_for_this_machine(
    registry: ProfileRegistry, which: Which = shutil.which
) -> tuple[ProfileRegistry, list[str]]:
    """The registry with every local resource trimmed; notes say what was dropped."""
    kept: list[LoadedResource] = []
    notes: list[str] = []
    for loaded in registry:
        trimmed, missing = installed_only(loaded, which)
        kept.append(trimmed)
        if missing:
            notes.append(
                f"{loaded.id}: {', '.join(missing)} not found on this machine; jobs "
                f"there run without {'it' if len(missing) == 1 else 'them'}"
            )
    return ProfileRegistry(kept), notes
