"""Batch-system plug-ins, one module each, looked up by the profile's scheduler kind."""

from __future__ import annotations

from typing import cast

from iri_gateway.schedulers import local, pbs, slurm
from iri_gateway.schedulers.base import Scheduler

SCHEDULERS: dict[str, Scheduler] = {
    module.name: cast(Scheduler, module) for module in (slurm, pbs, local)
}

__all__ = ["SCHEDULERS", "Scheduler"]
