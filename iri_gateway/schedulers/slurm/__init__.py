"""Slurm: batch-script directives (rendering) and one module per command (execution)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from iri_gateway.models.job_arrays import ArrayRules
from iri_gateway.schedulers.base import SchedulerPlugin
from iri_gateway.schedulers.batch import BatchSystem
from iri_gateway.schedulers.slurm.directive_rules import SlurmDirectiveRules, gpu_request_refusal
from iri_gateway.schedulers.slurm.directives import cluster_layout, directives, launcher

if TYPE_CHECKING:
    from iri_gateway.models.profile import SchedulerConfig
    from iri_gateway.transport.base import Transport


def batch_system(*, transport: Transport, config: SchedulerConfig, data_dir: Path) -> BatchSystem:
    """Slurm's commands over the transport; finished jobs are looked up where `history` says."""
    # The execution side loads when a backend is built, never just to render a script.
    from iri_gateway.schedulers.slurm.batch import SlurmBatch

    return SlurmBatch(transport, history=config.history)


SCHEDULER = SchedulerPlugin(
    kind="slurm",
    template="slurm.sh.j2",
    directives=directives,
    launcher=launcher,
    cluster_layout=cluster_layout,
    batch_factory=batch_system,
    this_machine=False,
    one_process=False,
    parallel_needs_site_launcher=False,
    batch_queue=True,
    gpu_request_default="gpus-per-task",
    gpu_request_check=gpu_request_refusal,
    offers_oci_containers=True,
    container_directives=True,
    directive_rules=SlurmDirectiveRules(),
    arrays=ArrayRules(
        index_variable="SLURM_ARRAY_TASK_ID",
        output_index="%a",
        size_limit="Slurm's MaxArraySize",
        limits_last_index=True,
        default_size=1001,
    ),
)
