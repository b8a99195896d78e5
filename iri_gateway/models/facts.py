"""The hardware facts of a resource, from its structured profile (docs/design.md Contract 1).

Flavour requirements are checked against these facts, and the capabilities document shows
them, so both always agree. Nothing here is hand-written per site except the profile's own
`labels`, which are added last and may not redefine a standard fact.
"""

from __future__ import annotations

from typing import Any

from iri_gateway.models.profile import Resource


def hardware_facts(resource: Resource) -> dict[str, Any]:
    """The standard facts of docs/design.md Contract 1 for one resource, plus its labels."""
    nodes = resource.nodes
    facts: dict[str, Any] = {
        "gpu_count": nodes.gpus.count if nodes.gpus else 0,
        "cpu_arch": nodes.cpu.arch,
        "cpu_cores": nodes.cpu.cores,
        "memory_gib": nodes.memory_gib,
        "node_count": nodes.count,
        "runtime": [*resource.runtimes.available(), "none"],
    }
    if nodes.cpu.mhz is not None:
        facts["cpu_mhz"] = nodes.cpu.mhz
    if nodes.gpus is not None:
        facts["gpu_vendor"] = nodes.gpus.vendor
        facts["gpu_model"] = nodes.gpus.model
        if nodes.gpus.memory_gib is not None:
            facts["gpu_memory_gib"] = nodes.gpus.memory_gib
        if nodes.gpus.cuda is not None:
            facts["nvidia_cuda"] = nodes.gpus.cuda
        if nodes.gpus.rocm is not None:
            facts["rocm"] = nodes.gpus.rocm
    if resource.mpi is not None:
        facts["mpi"] = resource.mpi.flavour
    facts.update(resource.labels)
    return facts
