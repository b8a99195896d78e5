"""GPUs given to a container without a count are reserved from the real Slurm: the test
cluster's `cluster-gpu` keeps the default `gpu_default_request: whole-node`, so a job naming
only a CDI device gets both GPUs of its node from Slurm (`CUDA_VISIBLE_DEVICES` in the batch
step, set by Slurm for the GRES it granted), and the device in its container."""

from __future__ import annotations

import pytest

from iri_gateway.models.job import JobState
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.service.jobs.engine import Engine
from tests.integration.conftest import ClusterInfo, wait_all_final

pytestmark = pytest.mark.integration


def test_cdi_devices_without_a_count_reserve_the_whole_node(
    cluster_engine: Engine, cluster: ClusterInfo
) -> None:
    engine = cluster_engine
    spec = parse_jobspec(
        {
            "executable": "/bin/sh",
            "arguments": ["-c", 'echo "in container: gpu=${IRI_FAKE_GPU-}"'],
            "pre_launch": 'echo "granted by slurm: ${CUDA_VISIBLE_DEVICES-none}"',
            "container": {"image": cluster.test_image, "devices": ["example.com/gpu=all"]},
            "attributes": {"duration": 120},
        }
    )
    record = engine.submit(owner="root", resource_id="cluster-gpu", spec=spec).record
    assert record.native_id, record
    assert "#SBATCH --gres=gpu:2" in record.script.splitlines()
    assert record.plan["gpu"]["request"] == "whole-node"
    assert record.plan["gpu"]["gpus_per_node"] == 2
    record = wait_all_final(engine, [record.id])[record.id]
    output = engine.read_output(owner="root", job_id=record.id)
    assert record.state == JobState.COMPLETED, (record, output)
    assert output.splitlines() == ["granted by slurm: 0,1", "in container: gpu=0,1"]
