"""The official resource lists (`getComputeResources`, `getFilesystemResources`) and storage
operations (`getStorageLocations`, `getStorageAccessEndpoints`) over ASGI: bodies are checked
against the OFFICIAL schemas, paths are filled in per caller, the spec's filters hold, another
user's paths never show, unknown resources are 404 and a missing token 401; and the profile's
`storage` section is refused with its line when it is wrong."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from iri_gateway.api.app import create_app
from iri_gateway.errors import ProfileError
from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.service.operations.settings import Settings
from tests.api.conftest import OfficialSchemas

pytestmark = pytest.mark.anyio

RESOURCE = """\
  - id: {id}
    name: {id}
    scheduler:
      kind: local
    queues:
      - name: local
        default: true
    nodes:
      count: 1
      cpu: {{arch: x86_64, cores: 2}}
      memory_gib: 4
    runtimes:
      default: none
"""
PROFILE = (
    "facility:\n  id: store\n  name: Storage site\nresources:\n"
    + RESOURCE.format(id="box")
    + """\
    storage:
      locations:
        - {logical_name: home, path: "/home/{account_initial}/{account}", filesystem: nfs}
        - {logical_name: scratch, path: "/scratch//{user}/", performance_tier: high,
           purge_policy_days: 30}
        - {logical_name: project, path: "/proj/{project}/data", shared: true}
        - {logical_name: archive, path: "/hpss/{user}", performance_tier: tape,
           access: {read: true, write: false, execute: true}}
      access_endpoints:
        - {id: dtn, protocol: globus, auth_type: globus, display_name: DTN,
           capabilities: [list, read, write, transfer],
           endpoint_id: 5e0cdbd2-3f1a-4e57-beed-b95c0bb83b7c,
           uri: "globus://5e0cdbd2-3f1a-4e57-beed-b95c0bb83b7c/", root_path: "/home/{user}"}
        - {id: objects, protocol: s3, auth_type: s3-keys, capabilities: [read],
           bucket: box-data, endpoint_url: "https://s3.box.example"}
"""
    + RESOURCE.format(id="bare")
)


@pytest.fixture
def site(tmp_path: Path) -> FastAPI:
    profile = tmp_path / "store.yaml"
    profile.write_text(PROFILE, encoding="utf-8")
    return create_app(Settings(data_dir=tmp_path / "data", profiles=[profile]), run_poller=False)


@pytest.fixture
async def http(site: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=site)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


def bearer(app: FastAPI, user: str, projects: list[str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {app.state.tokens.issue(user, projects)}"}


async def locations(
    http: httpx.AsyncClient,
    headers: dict[str, str],
    official: OfficialSchemas,
    resource: str = "box",
    **query: str,
) -> list[dict[str, Any]]:
    response = await http.get(
        f"/api/v2/storage/locations/{resource}", params=query, headers=headers
    )
    assert response.status_code == 200, response.text
    body: list[dict[str, Any]] = response.json()
    official.check("StorageInstance", body, array=True)
    return body


async def test_compute_and_filesystem_resources_are_the_profile_resources(
    http: httpx.AsyncClient, official: OfficialSchemas
) -> None:
    compute = await http.get("/api/v2/compute/resources")
    files = await http.post("/api/v2/filesystem/resources")
    for response in (compute, files):
        assert response.status_code == 200, response.text
        official.check("Resource", response.json(), array=True)
        assert [r["id"] for r in response.json()] == ["box", "bare"]
    assert all("compute" in r["supported_endpoints"] for r in compute.json())
    assert all("filesystem" in r["supported_endpoints"] for r in files.json())
    one = await http.get("/api/v2/status/resources/box")
    assert compute.json()[0] == one.json()


async def test_locations_are_filled_in_for_each_caller(
    site: FastAPI, http: httpx.AsyncClient, official: OfficialSchemas
) -> None:
    alice = await locations(http, bearer(site, "alice", ["p1", "p2"]), official)
    assert [(entry["logical_name"], entry["path"]) for entry in alice] == [
        ("home", "/home/a/alice"),
        ("scratch", "/scratch/alice"),
        ("project", "/proj/p1/data"),
        ("project", "/proj/p2/data"),
        ("archive", "/hpss/alice"),
    ]
    assert alice[0]["filesystem"] == "nfs"
    assert alice[1]["purge_policy_days"] == 30
    assert alice[2]["shared"] is True
    assert alice[4]["access"] == {"read": True, "write": False, "execute": True}
    bob = await locations(http, bearer(site, "bob", []), official)
    assert [entry["path"] for entry in bob] == ["/home/b/bob", "/scratch/bob", "/hpss/bob"]
    assert not any("alice" in entry["path"] or "/proj/" in entry["path"] for entry in bob)


async def test_a_name_that_is_not_one_path_component_gets_no_location(
    site: FastAPI, http: httpx.AsyncClient, official: OfficialSchemas
) -> None:
    body = await locations(http, bearer(site, "..", ["../etc", "ok"]), official)
    assert [entry["path"] for entry in body] == ["/proj/ok/data"]


async def test_intent_filter_as_the_spec_defines_it(
    site: FastAPI, http: httpx.AsyncClient, official: OfficialSchemas
) -> None:
    headers = bearer(site, "alice", ["p1"])

    async def tiers(intent: str) -> list[str]:
        body = await locations(http, headers, official, intent=intent)
        return [entry["logical_name"] for entry in body]

    assert await tiers("read") == ["home", "scratch", "project", "archive"]
    assert await tiers("staging") == ["home", "scratch", "project"]
    assert await tiers("long-term-storage") == ["archive"]
    assert await tiers("write") == ["home", "scratch", "project"]
    refused = await http.get(
        "/api/v2/storage/locations/box", params={"intent": "delete"}, headers=headers
    )
    assert refused.status_code == 422
    assert "intent" in refused.text


async def test_logicalpath_project_and_allocation_filters(
    site: FastAPI, http: httpx.AsyncClient, official: OfficialSchemas
) -> None:
    headers = bearer(site, "alice", ["p1", "p2"])
    scratch = await locations(http, headers, official, logicalpath="scratch")
    assert [entry["path"] for entry in scratch] == ["/scratch/alice"]
    p2 = await locations(http, headers, official, project="p2", logicalpath="project")
    assert [entry["path"] for entry in p2] == ["/proj/p2/data"]
    by_allocation = await locations(http, headers, official, allocation="p1:box")
    assert "/proj/p1/data" in [entry["path"] for entry in by_allocation]
    assert "/proj/p2/data" not in [entry["path"] for entry in by_allocation]
    for query in ({"project": "p3"}, {"allocation": "p3:box"}, {"allocation": "p1:bare"}):
        refused = await http.get("/api/v2/storage/locations/box", params=query, headers=headers)
        assert refused.status_code == 404, (query, refused.text)
        assert refused.json()["invalid_params"][0]["name"] == next(iter(query))


async def test_access_endpoints_with_their_protocol_fields_only(
    site: FastAPI, http: httpx.AsyncClient, official: OfficialSchemas
) -> None:
    headers = bearer(site, "alice", [])
    response = await http.get("/api/v2/storage/access-endpoints/box", headers=headers)
    assert response.status_code == 200, response.text
    body = response.json()
    official.check("AccessEndpoint", body, array=True)
    assert body[0] == {
        "id": "dtn",
        "resource_id": "box",
        "protocol": "globus",
        "display_name": "DTN",
        "auth_type": "globus",
        "capabilities": ["list", "read", "write", "transfer"],
        "endpoint_id": "5e0cdbd2-3f1a-4e57-beed-b95c0bb83b7c",
        "uri": "globus://5e0cdbd2-3f1a-4e57-beed-b95c0bb83b7c/",
        "root_path": "/home/alice",
    }
    assert body[1] == {
        "id": "objects",
        "resource_id": "box",
        "protocol": "s3",
        "auth_type": "s3-keys",
        "capabilities": ["read"],
        "bucket": "box-data",
        "endpoint_url": "https://s3.box.example",
    }
    s3 = await http.get(
        "/api/v2/storage/access-endpoints/box", params={"protocol": "s3"}, headers=headers
    )
    assert [e["id"] for e in s3.json()] == ["objects"]
    one = await http.get(
        "/api/v2/storage/access-endpoints/box", params={"endpoint_id": "dtn"}, headers=headers
    )
    assert [e["id"] for e in one.json()] == ["dtn"]
    none = await http.get("/api/v2/storage/access-endpoints/bare", headers=headers)
    assert none.status_code == 200 and none.json() == []


@pytest.mark.parametrize(
    "path", ["/api/v2/storage/locations/{}", "/api/v2/storage/access-endpoints/{}"]
)
async def test_unknown_resource_is_404_and_no_token_401(
    site: FastAPI, http: httpx.AsyncClient, official: OfficialSchemas, path: str
) -> None:
    missing = await http.get(path.format("nowhere"), headers=bearer(site, "alice", []))
    assert missing.status_code == 404
    official.check("Problem", missing.json())
    assert "box" in missing.json()["detail"]
    for headers in ({}, {"Authorization": "Bearer not-a-token"}):
        refused = await http.get(path.format("box"), headers=headers)
        assert refused.status_code == 401, refused.text
        official.check("Problem", refused.json())


def test_profile_storage_errors_are_located(tmp_path: Path) -> None:
    cases = {
        "bucket: wrong": ("storage.access_endpoints[0]", "belong to another protocol"),
        "path: relative/{user}": ("storage.locations[0].path", "must be absolute"),
        "path: /x/{home}": ("storage.locations[0].path", "placeholders"),
    }
    for needle, (field, reason) in cases.items():
        endpoint = (
            "{id: e, protocol: globus, auth_type: globus, capabilities: [read], "
            "endpoint_id: u" + (", bucket: wrong}" if "bucket" in needle else "}")
        )
        location = needle if needle.startswith("path") else "path: /ok"
        text = PROFILE.split("    storage:")[0] + (
            "    storage:\n"
            f"      locations:\n        - logical_name: home\n          {location}\n"
            f"      access_endpoints:\n        - {endpoint}\n"
        )
        profile = tmp_path / "bad.yaml"
        profile.write_text(text, encoding="utf-8")
        with pytest.raises(ProfileError) as caught:
            ProfileRegistry.from_paths([profile])
        issues = [i for i in caught.value.issues if i.field.endswith(field)]
        assert issues, caught.value.issues
        line = next(
            n
            for n, text_line in enumerate(text.splitlines(), start=1)
            if needle in text_line or (field.endswith("[0]") and "- {id: e" in text_line)
        )
        assert issues[0].line == line, (issues[0], line)
        assert reason in issues[0].reason
