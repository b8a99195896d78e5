"""Projects granted on a resource by its profile's `project_rules` (issue 31), over ASGI with
JWT callers whose claims say their groups: a project only a resource's rule grants may be
charged there (launch, bulk launch, update), filters its storage paths and is listed with an
allocation there only; elsewhere it is refused 403 as any project the token lacks, and the
refusal names the projects granted and says rules exist without showing a pattern."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from iri_gateway.api.app import create_app
from tests.api.test_jwt_auth import asgi_client, jwt_settings
from tests.api.test_jwt_auth import token as signed

pytestmark = pytest.mark.anyio

RESOURCE = """\
  - id: {id}
    name: {id}
    scheduler: {{kind: local}}
    queues: [{{name: local, default: true}}]
    nodes: {{count: 1, cpu: {{arch: x86_64, cores: 2}}, memory_gib: 4}}
    runtimes: {{default: none}}
    storage:
      locations:
        - {{logical_name: project, path: "/proj/{{project}}/data", shared: true}}
"""
RULES = """\
    project_rules:
      - {claim: groups, match: 'hpc-(?P<team>[a-z]+)', project: '{team}'}
      - {claim: groups, match: 'hpc-(?P<team>[a-z]+)', project: '{team}-gpu'}
      - {claim: groups, match: 'raw-(?P<name>.+)', project: '{name}'}
"""
PROFILE = (
    "facility: {id: site, name: Site}\nresources:\n"
    + RESOURCE.format(id="local")
    + RULES
    + RESOURCE.format(id="bare")
)
PATTERNS = ("hpc-", "(?P<", "team", "raw-")
"""What of the rules no refusal may show."""
JOB: dict[str, Any] = {"executable": "/bin/true"}


@pytest.fixture
async def gateway(jwks_url: str, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    profile = tmp_path / "site.yaml"
    profile.write_text(PROFILE, encoding="utf-8")
    settings = jwt_settings(tmp_path / "data", jwks_url, profiles=[profile])
    app: FastAPI = create_app(settings, run_poller=False)
    async with asgi_client(app) as client:
        yield client
    app.state.engine.close()


def caller(keys: tuple[Any, Any], groups: list[str]) -> dict[str, str]:
    """A JWT of carol: the token's own projects p1 and p2, and `groups`."""
    return {"Authorization": f"Bearer {signed(keys[0], groups=groups)}"}


def launch(project: str) -> dict[str, Any]:
    return {**JOB, "attributes": {"account": project}}


async def test_a_project_only_a_rule_grants_is_charged_there_and_refused_elsewhere(
    gateway: httpx.AsyncClient, keys: tuple[Any, Any]
) -> None:
    headers = caller(keys, ["users", "hpc-astro", "raw-../etc"])
    for project in ("astro", "astro-gpu", "p1"):
        accepted = await gateway.post(
            "/api/v2/compute/job/local", json=launch(project), headers=headers
        )
        assert accepted.status_code == 200, (project, accepted.text)
    refused = await gateway.post("/api/v2/compute/job/bare", json=launch("astro"), headers=headers)
    assert refused.status_code == 403, refused.text
    problem = refused.json()
    assert "may not charge project 'astro' on 'bare'" in problem["detail"]
    assert "granted: p1, p2" in problem["detail"], "the token's own, nothing by rules there"
    assert "project rules" not in problem["detail"], "bare has none"
    assert problem["invalid_params"][0]["name"] == "attributes.account"
    unsafe = await gateway.post("/api/v2/compute/job/local", json=launch("../etc"), headers=headers)
    assert unsafe.status_code == 403, "a rule grants no name that is not a plain project name"


async def test_the_refusal_on_a_resource_with_rules_names_the_grants_but_no_pattern(
    gateway: httpx.AsyncClient, keys: tuple[Any, Any]
) -> None:
    headers = caller(keys, ["hpc-bio"])
    refused = await gateway.post("/api/v2/compute/job/local", json=launch("chem"), headers=headers)
    assert refused.status_code == 403, refused.text
    detail = refused.json()["detail"]
    assert "granted: p1, p2, bio, bio-gpu" in detail, detail
    assert "project rules" in detail and "administrators" in detail, "say rules exist"
    assert "the token's 'projects' claim" in detail, "and how the token's are granted"
    for secret in PATTERNS:
        assert secret not in detail, f"{secret!r} of a rule shown: {detail}"
    no_groups = await gateway.post(
        "/api/v2/compute/job/local", json=launch("bio"), headers=caller(keys, [])
    )
    assert no_groups.status_code == 403, "granted by the claims of this call, not earlier ones"
    assert "granted: p1, p2;" in no_groups.json()["detail"]


async def test_bulk_launch_and_update_charge_what_the_resource_grants(
    gateway: httpx.AsyncClient, keys: tuple[Any, Any]
) -> None:
    headers = caller(keys, ["hpc-astro"])
    specs = [launch("astro"), launch("bio"), launch("p2")]
    local = await gateway.post("/api/v2/compute/jobs/local", json=specs, headers=headers)
    assert local.status_code == 200, local.text
    assert [r["status"] for r in local.json()] == [201, 403, 201], local.text
    assert "granted: p1, p2, astro, astro-gpu" in local.json()[1]["problem"]["detail"]
    bare = await gateway.post("/api/v2/compute/jobs/bare", json=specs, headers=headers)
    assert [r["status"] for r in bare.json()] == [403, 403, 201], bare.text
    job_id = local.json()[0]["job"]["id"]
    path = f"/api/v2/compute/job/local/{job_id}"
    refused = await gateway.put(path, json=launch("bio"), headers=headers)
    assert refused.status_code == 403, refused.text
    update = await gateway.put(path, json=launch("astro-gpu"), headers=headers)
    assert update.status_code != 403, update.text  # granted: past the check (the job may be done)


async def test_storage_and_account_operations_see_the_resources_grants(
    gateway: httpx.AsyncClient, keys: tuple[Any, Any]
) -> None:
    headers = caller(keys, ["hpc-astro"])
    found = await gateway.get(
        "/api/v2/storage/locations/local", params={"project": "astro"}, headers=headers
    )
    assert found.status_code == 200, found.text
    assert [entry["path"] for entry in found.json()] == ["/proj/astro/data"]
    everything = await gateway.get("/api/v2/storage/locations/local", headers=headers)
    paths = {entry["path"] for entry in everything.json()}
    assert {"/proj/p1/data", "/proj/astro/data", "/proj/astro-gpu/data"} <= paths
    elsewhere = await gateway.get(
        "/api/v2/storage/locations/bare", params={"allocation": "astro:bare"}, headers=headers
    )
    assert elsewhere.status_code == 404, elsewhere.text
    listed = await gateway.get("/api/v2/account/projects", headers=headers)
    assert [p["id"] for p in listed.json()] == ["p1", "p2", "astro", "astro-gpu"]
    allocations = await gateway.get(
        "/api/v2/account/projects/astro/project_allocations", headers=headers
    )
    assert [a["id"] for a in allocations.json()] == ["astro:local"], "only where it is granted"
    own = await gateway.get("/api/v2/account/projects/p1/project_allocations", headers=headers)
    assert [a["id"] for a in own.json()] == ["p1:local", "p1:bare"]
    missing = await gateway.get(
        "/api/v2/account/projects/astro/project_allocations/astro:bare", headers=headers
    )
    assert missing.status_code == 404
    stranger = await gateway.get("/api/v2/account/projects/astro", headers=caller(keys, []))
    assert stranger.status_code == 404
