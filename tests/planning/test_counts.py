"""Counts no node of the resource could hold are refused in negotiation (issue 11, item 8).

`process_count: 1e9` used to be planned for one node and wait in Slurm forever;
`processes_per_node: 2**63` reached sbatch, whose error named no field. Both are now
problems naming the field, what was asked and what the resource offers. testsite-gpu: 4
nodes of 2 cores and 2 GPUs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from iri_gateway.api.app import create_app
from iri_gateway.errors import Problem
from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.service.operations.settings import Settings
from tests.conftest import TEST_PROFILE, plan_for, problems_for


def only(problems: list[Problem], field: str) -> Problem:
    found = [p for p in problems if p.field == field]
    assert len(found) == 1, problems
    return found[0]


def job(**resources: Any) -> dict[str, Any]:
    return {"executable": "/bin/true", "launcher": "srun", "resources": resources}


def test_a_billion_processes_on_one_node_name_process_count(
    registry: ProfileRegistry,
) -> None:
    problems = problems_for(registry, "testsite-gpu", job(process_count=1e9))
    problem = only(problems, "resources.process_count")
    assert "1000000000 processes on 1 node(s)" in problem.reason
    assert "2 cores" in problem.reason
    assert problem.offered == "at most 2 on 1 node(s), 8 on all 4 nodes (set node_count)"


def test_processes_per_node_beyond_the_cores_names_processes_per_node(
    registry: ProfileRegistry,
) -> None:
    problems = problems_for(registry, "testsite-gpu", job(node_count=1, processes_per_node=2**63))
    problem = only(problems, "resources.processes_per_node")
    assert f"{2**63} processes per node" in problem.reason and "2 cores" in problem.reason
    assert problem.offered == "at most 2 per node"


def test_the_count_is_named_even_with_cores_per_process(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry, "testsite-gpu", job(node_count=2, process_count=9, cpu_cores_per_process=1)
    )
    assert only(problems, "resources.process_count").offered == (
        "at most 4 on 2 node(s), 8 on all 4 nodes (set node_count)"
    )
    assert "resources.cpu_cores_per_process" not in [p.field for p in problems]


def test_counts_that_fit_the_nodes_still_plan(registry: ProfileRegistry) -> None:
    plan = plan_for(registry, "testsite-gpu", job(node_count=4, processes_per_node=2))
    assert "--ntasks=8" in plan.script
    plan = plan_for(registry, "testsite-gpu", job(process_count=8, processes_per_node=2))
    assert "--nodes=4" in plan.script


@pytest.mark.anyio
async def test_plan_over_http_names_the_count(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path, profiles=[TEST_PROFILE]), run_poller=False)
    token = app.state.tokens.issue("alice", ["proj1"])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test"
    ) as client:
        response = await client.post(
            "/api/v2/compute/plan/testsite-gpu",
            content=b'{"executable": "/bin/true", "resources": {"process_count": 1e9}}',
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
    assert response.status_code == 422, response.text
    names = [p["name"] for p in response.json()["invalid_params"]]
    assert "resources.process_count" in names
