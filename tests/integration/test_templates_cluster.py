"""A cluster job built from a user's cluster template on the real test cluster (Slurm het job,
members in Podman): the counts the job chose, each member bootstrapped inside its container
before its program, the job's environment winning over the template's."""

from __future__ import annotations

from pathlib import Path

import pytest

from iri_gateway.models.job import JobState
from iri_gateway.models.job_templates import ClusterTemplate, TaskTemplate
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.service.jobs.engine import Engine
from tests.integration.conftest import ClusterInfo, wait_all_final

pytestmark = pytest.mark.integration

SAY = (
    'echo "$IRI_CLUSTER_ROLE$IRI_CLUSTER_ROLE_INDEX/$IRI_CLUSTER_SIZE boot=$BOOTED '
    'where=$(cat /tmp/booted) who=$WHO"'
)


def test_a_templated_cluster_runs_bootstrapped_members_on_slurm(
    cluster_engine: Engine, cluster: ClusterInfo
) -> None:
    engine = cluster_engine
    engine.templates.put(
        "root",
        "member",
        TaskTemplate(
            kind="task",
            image=cluster.test_image,
            executable="/bin/sh",
            arguments=["-c", SAY],
            environment={"WHO": "template"},
            bootstrap="BOOTED=yes; export BOOTED\nhostname > /tmp/booted",
        ),
    )
    engine.templates.put(
        "root",
        "ring",
        ClusterTemplate.model_validate(
            {
                "kind": "cluster",
                "roles": [
                    {"name": "head", "task": "member"},
                    {"name": "node", "task": "member", "min": 1, "max": 3},
                ],
            }
        ),
    )
    spec = parse_jobspec(
        {
            "template": "ring",
            "roles": [{"name": "node", "count": 2}],
            "environment": {"WHO": "job"},
            "attributes": {"duration": 300},
        }
    )
    submission = engine.submit(owner="root", resource_id="cluster", spec=spec)
    record = wait_all_final(engine, [submission.record.id])[submission.record.id]
    assert record.state == JobState.COMPLETED and record.exit_code == 0, record
    assert record.plan["template"] == "ring"
    assert [(r["name"], r["count"]) for r in record.plan["cluster"]["roles"]] == [
        ("head", 1),
        ("node", 2),
    ]
    folder = Path(record.effective_spec["directory"]) / f".iri-cluster-{record.native_id}"
    outputs = {
        "head1": engine.read_output(owner="root", job_id=record.id),
        **{name: (folder / f"{name}.out").read_text() for name in ("node1", "node2")},
    }
    for name, text in outputs.items():
        words = dict(word.split("=", 1) for word in text.split()[1:])
        assert text.split()[0] == f"{name}/3", outputs
        assert words["boot"] == "yes" and words["who"] == "job", outputs
        assert words["where"], "the bootstrap ran inside the member's container"
