"""PBS Pro / OpenPBS: batch-script directives (rendering) and one module per command."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from iri_gateway.models.job_arrays import ArrayRules
from iri_gateway.schedulers.base import SchedulerPlugin
from iri_gateway.schedulers.batch import BatchSystem
from iri_gateway.schedulers.pbs.directive_rules import PbsDirectiveRules, gpu_request_refusal
from iri_gateway.schedulers.pbs.directives import cluster_layout, directives, launcher

if TYPE_CHECKING:
    from iri_gateway.models.profile import SchedulerConfig
    from iri_gateway.transport.base import Transport


def batch_system(*, transport: Transport, config: SchedulerConfig, data_dir: Path) -> BatchSystem:
    """PBS's commands over the transport (`qstat -x` also knows the finished jobs)."""
    # The execution side loads when a backend is built, never just to render a script.
    from iri_gateway.schedulers.pbs.batch import PbsBatch

    return PbsBatch(transport)


SCHEDULER = SchedulerPlugin(
    kind="pbs",
    template="pbs.sh.j2",
    directives=directives,
    launcher=launcher,
    cluster_layout=cluster_layout,
    batch_factory=batch_system,
    this_machine=False,
    one_process=False,
    parallel_needs_site_launcher=True,
    batch_queue=True,
    gpu_request_default="ngpus",
    gpu_request_check=gpu_request_refusal,
    directive_rules=PbsDirectiveRules(),
    arrays=ArrayRules(
        index_variable="PBS_ARRAY_INDEX",
        output_index="^array_index^",
        size_limit="the PBS server's max_array_size",
        limits_last_index=False,
        default_size=10000,
        one_range=True,
    ),
)
