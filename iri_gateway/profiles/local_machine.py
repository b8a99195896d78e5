"""Resources whose profile says `nodes: {detect: true}` take their facts from this machine.

The measuring is `iri_gateway.machine_facts`; here the measured values replace the profile's
(`nodes.cpu`, `memory_gib`, `gpus`), so negotiation and placement use them like any written
fact, and the loaded resource records which facts were detected, for capabilities to mark.
What could not be measured keeps the profile's value, and a note says so (shown by `serve` at
start and by the command line), with the detector's own warning naming the file or program.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from iri_gateway.machine_facts import MachineFacts, detect_machine
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.profile import Gpus
from iri_gateway.profiles.loading import ProfileRegistry


def with_machine(loaded: LoadedResource, machine: MachineFacts) -> tuple[LoadedResource, list[str]]:
    """`loaded` with the measured facts when its profile asks for detection, and notes."""
    resource = loaded.resource
    nodes = resource.nodes
    if not nodes.detect:
        return loaded, []
    rid = resource.id
    notes = [f"{rid}: detecting this machine: {warning}" for warning in machine.warnings]
    detected: dict[str, Any] = {}
    cpu: dict[str, Any] = {}
    node: dict[str, Any] = {}
    measured = (
        ("cpu_arch", "arch", machine.arch, cpu, nodes.cpu.arch),
        ("cpu_cores", "cores", machine.cores, cpu, nodes.cpu.cores),
        ("cpu_mhz", "mhz", machine.mhz, cpu, nodes.cpu.mhz),
        ("memory_gib", "memory_gib", machine.memory_gib, node, nodes.memory_gib),
    )
    for fact, name, value, target, written in measured:
        if value is not None:
            target[name] = detected[fact] = value
        elif written is None:
            notes.append(f"{rid}: {fact} not detected and not in the profile: {rid} has none")
        else:
            notes.append(f"{rid}: {fact} not detected; the profile's {written!r} is used")
    gpus = _gpus(machine, nodes.gpus, rid, notes)
    node["gpus"] = gpus
    if machine.gpus is None or gpus is not nodes.gpus:  # measured, not the profile's kept
        detected["gpu_count"] = gpus.count if gpus else 0
    if gpus is not None and "gpu_count" in detected:
        detected.update({"gpu_vendor": gpus.vendor, "gpu_model": gpus.model})
        for fact, value in (
            ("gpu_memory_gib", gpus.memory_gib),
            ("nvidia_cuda", gpus.cuda),
            ("rocm", gpus.rocm),
        ):
            if value is not None:
                detected[fact] = value
    detected["cdi_devices"] = list(machine.cdi_devices)
    new_nodes = nodes.model_copy(update={**node, "cpu": nodes.cpu.model_copy(update=cpu)})
    new_resource = resource.model_copy(update={"nodes": new_nodes})
    return replace(loaded, resource=new_resource, detected=MappingProxyType(detected)), notes


def registry_with_machine(
    registry: ProfileRegistry,
    detect: Callable[[], MachineFacts] = detect_machine,
    only: str | None = None,
) -> tuple[ProfileRegistry, list[str]]:
    """The registry with every `detect: true` resource measured (this machine once), and
    notes on what could not be; with `only`, just that resource (a command about another
    one does not measure this machine)."""
    wanted = {
        loaded.id
        for loaded in registry
        if loaded.resource.nodes.detect and (only is None or loaded.id == only)
    }
    if not wanted:
        return registry, []
    machine = detect()
    kept: list[LoadedResource] = []
    notes: list[str] = []
    for loaded in registry:
        if loaded.id not in wanted:
            kept.append(loaded)
            continue
        measured, said = with_machine(loaded, machine)
        kept.append(measured)
        notes += said
    return ProfileRegistry(kept), notes


def _gpus(machine: MachineFacts, written: Gpus | None, rid: str, notes: list[str]) -> Gpus | None:
    """The GPUs found, as profile facts; none found means none (the profile's are dropped)."""
    found = machine.gpus
    if found is None:
        if written is not None:
            notes.append(
                f"{rid}: no GPUs found on this machine; the profile's "
                f"{written.count} x {written.model} are left out"
            )
        return None
    try:
        return Gpus.model_validate(
            {
                "count": found.count,
                "vendor": found.vendor,
                "model": found.model,
                "memory_gib": found.memory_gib,
                "cuda": found.cuda,
                "rocm": found.rocm,
            }
        )
    except ValidationError as error:
        notes.append(
            f"{rid}: the GPUs found ({found}) are not usable as facts "
            f"({error.errors()[0]['msg']}); the profile's GPUs are used"
        )
        return written
