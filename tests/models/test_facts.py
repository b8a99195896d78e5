"""The standard fact names (STANDARD_FACTS, which the constraint language knows the kinds of)
and the code that computes them (`hardware_facts`) agree, on every shipped resource.

A fact is computed exactly when the profile describes it (GPU facts when the nodes have GPUs,
`nvidia_cuda` when a CUDA version is given, ...); nothing is computed that is neither a
standard fact nor one of the resource's labels; every value has the kind its name promises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from packaging.version import Version

from iri_gateway.models.constraints import STANDARD_FACTS, FactKind
from iri_gateway.models.facts import hardware_facts
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.profile import Resource
from iri_gateway.profiles.loading import ProfileRegistry

SHIPPED = list(ProfileRegistry.builtin())

# When each standard fact applies to a resource, read from the profile's own fields.
APPLIES: dict[str, Callable[[Resource], bool]] = {
    "gpu_count": lambda r: True,
    "gpu_vendor": lambda r: r.nodes.gpus is not None,
    "gpu_model": lambda r: r.nodes.gpus is not None,
    "gpu_memory_gib": lambda r: r.nodes.gpus is not None and r.nodes.gpus.memory_gib is not None,
    "nvidia_cuda": lambda r: r.nodes.gpus is not None and r.nodes.gpus.cuda is not None,
    "rocm": lambda r: r.nodes.gpus is not None and r.nodes.gpus.rocm is not None,
    "cpu_arch": lambda r: True,
    "cpu_mhz": lambda r: r.nodes.cpu.mhz is not None,
    "cpu_cores": lambda r: True,
    "memory_gib": lambda r: True,
    "node_count": lambda r: True,
    "runtime": lambda r: True,
    "mpi": lambda r: r.mpi is not None,
    # Measured on the gateway's machine only (`nodes.detect`), never derived from a profile:
    # tests/profiles/test_machine_facts.py.
    "cdi_devices": lambda r: False,
}
MEASURED_ONLY = {"cdi_devices"}


def _of_kind(kind: FactKind, value: Any) -> bool:
    if kind is FactKind.NUMBER:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is FactKind.VERSION:
        return isinstance(value, str) and isinstance(Version(value), Version)
    if kind is FactKind.NAME:
        return isinstance(value, str) and value != ""
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def test_every_standard_fact_says_when_it_applies() -> None:
    assert set(APPLIES) == set(STANDARD_FACTS)


@pytest.mark.parametrize("loaded", SHIPPED, ids=lambda loaded: loaded.id)
def test_computed_facts_are_the_standard_ones_that_apply_plus_labels(
    loaded: LoadedResource,
) -> None:
    resource = loaded.resource
    facts = hardware_facts(resource)
    labels = set(resource.labels)
    standard = set(facts) - labels
    assert standard <= set(STANDARD_FACTS), sorted(standard - set(STANDARD_FACTS))
    assert standard == {name for name, applies in APPLIES.items() if applies(resource)}
    assert {name: facts[name] for name in labels} == dict(resource.labels)
    for name in standard:
        assert _of_kind(STANDARD_FACTS[name], facts[name]), (name, facts[name])
    assert dict(loaded.facts) == facts


def test_the_shipped_resources_compute_every_standard_fact() -> None:
    computed = {name for loaded in SHIPPED for name in hardware_facts(loaded.resource)}
    derived = set(STANDARD_FACTS) - MEASURED_ONLY
    assert derived <= computed, sorted(derived - computed)
