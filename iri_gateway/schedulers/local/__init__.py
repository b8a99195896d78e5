"""The `local` scheduler: each job is a detached bash process on the gateway host.

Rendering (`directives.py`: no directives, no launcher, members on loopback) and execution
(`batch.py`: a folder per job under the data directory) in one plug-in.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from iri_gateway.models.job_arrays import ArrayRules
from iri_gateway.schedulers.base import SchedulerPlugin
from iri_gateway.schedulers.batch import BatchSystem
from iri_gateway.schedulers.directive_rules import NoDirectiveLines
from iri_gateway.schedulers.local.directives import cluster_layout, directives, launcher

if TYPE_CHECKING:
    from iri_gateway.models.profile import SchedulerConfig
    from iri_gateway.transport.base import Transport


def batch_system(*, transport: Transport, config: SchedulerConfig, data_dir: Path) -> BatchSystem:
    """Local jobs run as the gateway's own processes, in folders under `data_dir`, not through
    the transport."""
    # The execution side loads when a backend is built, never just to render a script.
    from iri_gateway.schedulers.local.batch import LocalBatch

    return LocalBatch(data_dir / "local-jobs")


def any_gpu_request(word: str) -> None:
    """The local script requests no GPUs: any form a profile names is accepted, unused."""
    return None


SCHEDULER = SchedulerPlugin(
    kind="local",
    template="local.sh.j2",
    directives=directives,
    launcher=launcher,
    cluster_layout=cluster_layout,
    batch_factory=batch_system,
    this_machine=True,
    one_process=True,
    parallel_needs_site_launcher=False,
    batch_queue=False,
    gpu_request_default="gpus-per-task",
    gpu_request_check=any_gpu_request,
    directive_rules=NoDirectiveLines(),
    arrays=ArrayRules(
        index_variable="IRI_LOCAL_ARRAY_INDEX",
        output_index="%a",
        size_limit="the profile's scheduler.max_array_size",
        limits_last_index=False,
        default_size=1000,
    ),
)
