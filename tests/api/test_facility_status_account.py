"""The facility, status and account operations over HTTP, checked against the OFFICIAL schemas.

Every body is validated with `jsonschema` against the component schemas of
`openapi/official/iri-facility-api-v2.openapi.yaml` (date-time formats included), so a
field the official schema requires but the gateway leaves out fails here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from iri_gateway.api.app import create_app
from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.service.operations.settings import Settings
from tests.api.conftest import OfficialSchemas

pytestmark = pytest.mark.anyio
V2 = "/api/v2"
TESTS = Path(__file__).parent.parent
NODE_HOURS = "urn:doe-iri:allocation:compute:node-hours"
CAP = "urn:doe-iri:compute:system-capability:"

# (path, official schema, is a list) of every public GET operation with no outage declared.
PUBLIC = [
    ("/facility", "Facility", False),
    ("/facility/sites", "Site", True),
    ("/facility/sites/local", "Site", False),
    ("/status/resources", "Resource", True),
    ("/status/resources/local", "Resource", False),
    ("/status/incidents", "Incident", True),
    ("/status/events", "Event", True),
    ("/account/capabilities", "Capability", True),
    ("/account/capabilities/local", "Capability", False),
]
# (path, official schema, is a list) of the operations that need a token (alice, proj1).
PRIVATE = [
    ("/account/projects", "Project", True),
    ("/account/projects/proj1", "Project", False),
    ("/account/projects/proj1/project_allocations", "ProjectAllocation", True),
    ("/account/projects/proj1/project_allocations/proj1:local", "ProjectAllocation", False),
    (
        "/account/projects/proj1/project_allocations/proj1:local/user_allocations",
        "UserAllocation",
        True,
    ),
    (
        "/account/projects/proj1/project_allocations/proj1:local/user_allocations/"
        "proj1:local:alice",
        "UserAllocation",
        False,
    ),
]


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def problem_of(response: httpx.Response, official: OfficialSchemas) -> dict[str, Any]:
    assert response.headers["content-type"] == "application/problem+json", response.text
    body: dict[str, Any] = response.json()
    official.check("Problem", body)
    assert body["status"] == response.status_code
    return body


def fleet_app(tmp_path: Path, outages: list[str]) -> FastAPI:
    """Every shipped profile plus the test site, with `outages` declared."""
    profiles = [*ProfileRegistry.builtin_files(), TESTS / "profiles" / "testsite.yaml"]
    settings = Settings(
        data_dir=tmp_path, profiles=profiles, outages=outages, facility_name="test-facility"
    )
    return create_app(settings, run_poller=False)


@pytest.fixture
async def fleet(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A client of the whole fleet with frontier declared down, and a token of alice."""
    app = fleet_app(tmp_path, ["frontier", "no-such-resource"])
    token: str = app.state.tokens.issue("alice", ["proj1", "proj2"])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client, token


@pytest.mark.parametrize(("path", "schema", "array"), PUBLIC)
async def test_public_operations_need_no_token_and_follow_the_official_schema(
    client: httpx.AsyncClient, official: OfficialSchemas, path: str, schema: str, array: bool
) -> None:
    response = await client.get(V2 + path)
    assert response.status_code == 200, response.text
    official.check(schema, response.json(), array=array)


@pytest.mark.parametrize(("path", "schema", "array"), PRIVATE)
async def test_account_operations_follow_the_official_schema(
    client: httpx.AsyncClient,
    token: str,
    official: OfficialSchemas,
    path: str,
    schema: str,
    array: bool,
) -> None:
    response = await client.get(V2 + path, headers=auth(token))
    assert response.status_code == 200, response.text
    official.check(schema, response.json(), array=array)


@pytest.mark.parametrize("path", [path for path, _, _ in PRIVATE])
@pytest.mark.parametrize("bad", [None, "not-a-token"])
async def test_account_operations_need_a_valid_token(
    client: httpx.AsyncClient, official: OfficialSchemas, path: str, bad: str | None
) -> None:
    response = await client.get(V2 + path, headers=auth(bad) if bad else {})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    problem_of(response, official)


async def test_capabilities_are_public_as_in_the_official_spec(
    client: httpx.AsyncClient, official_spec: dict[str, Any]
) -> None:
    for path in ("/account/capabilities", "/account/capabilities/{capability_id}"):
        assert "security" not in official_spec["paths"][V2 + path]["get"]
    assert (await client.get(V2 + "/account/capabilities/local")).status_code == 200


async def test_facility_lists_one_site_per_facility_profile(
    fleet: tuple[httpx.AsyncClient, str], official: OfficialSchemas
) -> None:
    client, _ = fleet
    facility = (await client.get(V2 + "/facility")).json()
    assert facility["id"] == "test-facility"
    sites = (await client.get(V2 + "/facility/sites")).json()
    official.check("Site", sites, array=True)
    ids = [site["id"] for site in sites]
    assert sorted(ids) == [
        "alcf",
        "alcf-aurora",
        "example-cdi",
        "example-slurm-oci",
        "lanl",
        "local",
        "nersc",
        "olcf",
        "testsite",
    ]
    assert facility["site_uris"] == [f"http://test{V2}/facility/sites/{i}" for i in ids]
    nersc = next(site for site in sites if site["id"] == "nersc")
    assert nersc["resource_uris"] == [
        f"http://test{V2}/status/resources/perlmutter-gpu",
        f"http://test{V2}/status/resources/perlmutter-cpu",
    ]
    assert nersc["attributes"]["example_profile"] is True
    assert "example_profile" not in sites[ids.index("testsite")].get("attributes", {})
    named = await client.get(V2 + "/facility/sites", params={"name": nersc["name"]})
    assert [s["id"] for s in named.json()] == ["nersc"]
    page = await client.get(V2 + "/facility/sites", params={"offset": 1, "limit": 2})
    assert [s["id"] for s in page.json()] == ids[1:3]


async def test_every_link_leads_to_a_valid_official_object(
    fleet: tuple[httpx.AsyncClient, str], official: OfficialSchemas
) -> None:
    """Follow facility -> sites -> resources -> capabilities, incidents -> events."""
    client, token = fleet
    seen: set[str] = set()

    async def follow(uri: str, schema: str) -> dict[str, Any]:
        assert uri.startswith("http://test/api/v2/"), uri
        response = await client.get(uri, headers=auth(token))
        assert response.status_code == 200, f"{uri}: {response.text}"
        body: dict[str, Any] = response.json()
        official.check(schema, body)
        assert body["self_uri"] == uri
        seen.add(uri)
        return body

    facility = await follow(f"http://test{V2}/facility", "Facility")
    for site_uri in facility["site_uris"]:
        site = await follow(site_uri, "Site")
        for resource_uri in site["resource_uris"]:
            resource = await follow(resource_uri, "Resource")
            assert resource["site_uri"] == site_uri
            for capability_uri in resource["capability_uris"]:
                await follow(capability_uri, "Capability")
    for incident in (await client.get(V2 + "/status/incidents")).json():
        for event_uri in incident["event_uris"]:
            event = await follow(event_uri, "Event")
            assert event["incident_uri"] == incident["self_uri"]
            assert event["resource_uri"] in incident["resource_uris"]
    allocations = (
        await client.get(V2 + "/account/projects/proj2/project_allocations", headers=auth(token))
    ).json()
    for allocation in allocations:
        await follow(allocation["project_uri"], "Project")
        await follow(allocation["capability_uri"], "Capability")
    assert len(seen) > 20


async def test_resources_describe_their_hardware_with_the_registry_vocabulary(
    fleet: tuple[httpx.AsyncClient, str],
) -> None:
    client, _ = fleet
    resources = {r["id"]: r for r in (await client.get(V2 + "/status/resources")).json()}
    gpu = resources["perlmutter-gpu"]
    assert gpu["resource_type"] == "urn:doe-iri:resource:compute:system"
    assert "compute" in gpu["supported_endpoints"]
    assert gpu["group"] == "nersc"
    attributes = gpu["attributes"]
    assert attributes["schema_version"] == "1.0.0"
    assert attributes["system_capabilities"] == [
        CAP + "batch-scheduling",
        CAP + "container-execution",
        CAP + "accelerator-support",
    ]
    assert attributes["configured_gpu_count"] == 4 * attributes["configured_node_count"]
    assert (
        CAP + "accelerator-support"
        not in resources["perlmutter-cpu"]["attributes"]["system_capabilities"]
    )
    assert resources["perlmutter-cpu"]["attributes"]["configured_gpu_count"] == 0
    local = resources["local"]["attributes"]
    assert local["configured_node_count"] == 1
    assert CAP + "batch-scheduling" not in local["system_capabilities"]
    assert gpu["capability_uris"] == [f"http://test{V2}/account/capabilities/perlmutter-gpu"]


async def test_a_declared_outage_is_the_resource_status_and_an_incident(
    fleet: tuple[httpx.AsyncClient, str], official: OfficialSchemas
) -> None:
    client, _ = fleet
    frontier = (await client.get(V2 + "/status/resources/frontier")).json()
    assert frontier["current_status"] == "down"
    assert (await client.get(V2 + "/status/resources/polaris")).json()["current_status"] == "up"
    down = await client.get(V2 + "/status/resources", params={"current_status": "down"})
    assert [r["id"] for r in down.json()] == ["frontier"]

    incidents = (await client.get(V2 + "/status/incidents")).json()
    official.check("Incident", incidents, array=True)
    assert [i["id"] for i in incidents] == ["outage-frontier"]  # unknown ids are ignored
    incident = incidents[0]
    assert incident["status"] == "down" and incident["resolution"] == "unresolved"
    assert incident["resource_uris"] == [frontier["self_uri"]]
    assert "end" not in incident
    same = (await client.get(V2 + "/status/incidents/outage-frontier")).json()
    assert same == incident

    events = (
        await client.get(V2 + "/status/events", params={"incident_id": "outage-frontier"})
    ).json()
    official.check("Event", events, array=True)
    assert [e["self_uri"] for e in events] == incident["event_uris"]
    event = (await client.get(incident["event_uris"][0])).json()
    assert event["status"] == "down" and event["resource_uri"] == frontier["self_uri"]
    assert event["occurred_at"] == incident["start"]


async def test_incident_and_event_filters(fleet: tuple[httpx.AsyncClient, str]) -> None:
    client, _ = fleet
    incident = (await client.get(V2 + "/status/incidents")).json()[0]
    start = datetime.fromisoformat(incident["start"])
    before = (start - timedelta(hours=1)).isoformat()
    after = (start + timedelta(hours=1)).isoformat()

    async def ids(path: str, **params: str) -> list[str]:
        response = await client.get(V2 + path, params=params)
        assert response.status_code == 200, response.text
        return [item["id"] for item in response.json()]

    assert await ids("/status/incidents", resource_id="frontier") == ["outage-frontier"]
    assert await ids("/status/incidents", resource_id="polaris") == []
    assert await ids("/status/incidents", status="up") == []
    assert await ids("/status/incidents", type="planned") == ["outage-frontier"]
    assert await ids("/status/incidents", resolution="completed") == []
    assert await ids("/status/incidents", time=before) == []
    assert await ids("/status/incidents", time=after) == ["outage-frontier"]
    assert await ids("/status/incidents", **{"from": after}) == ["outage-frontier"]  # ongoing
    assert await ids("/status/incidents", to=before) == []
    assert await ids("/status/incidents", modified_since=after) == []
    assert await ids("/status/incidents", modified_since=before) == ["outage-frontier"]
    assert await ids("/status/events", resource_id="frontier") == ["outage-frontier-declared"]
    assert await ids("/status/events", incident_id="outage-polaris") == []
    assert await ids("/status/events", to=before) == []
    assert await ids("/status/events", **{"from": before}) == ["outage-frontier-declared"]
    assert await ids("/status/events", status="down", offset="1") == []


async def test_no_outage_means_empty_incident_and_event_lists(
    client: httpx.AsyncClient, official: OfficialSchemas
) -> None:
    for path, schema in (("/status/incidents", "Incident"), ("/status/events", "Event")):
        response = await client.get(V2 + path)
        assert response.status_code == 200 and response.json() == []
        official.check(schema, response.json(), array=True)
    assert (await client.get(V2 + "/status/resources/local")).json()["current_status"] == "up"


async def test_resource_filters(
    fleet: tuple[httpx.AsyncClient, str], official: OfficialSchemas
) -> None:
    client, _ = fleet

    async def ids(**params: Any) -> list[str]:
        response = await client.get(V2 + "/status/resources", params=params)
        assert response.status_code == 200, response.text
        return [item["id"] for item in response.json()]

    everything = await ids()
    assert len(everything) == 11
    assert await ids(resource_type="urn:doe-iri:resource:compute") == everything
    assert await ids(resource_type="urn:doe-iri:resource:compute:system") == everything
    assert await ids(resource_type="urn:doe-iri:resource:compute:sys") == []
    assert await ids(resource_type="urn:doe-iri:resource:storage") == []
    assert await ids(capability=[NODE_HOURS]) == everything
    assert await ids(capability=["urn:doe-iri:allocation:storage:bytes"]) == []
    assert await ids(group="nersc") == ["perlmutter-gpu", "perlmutter-cpu"]
    assert await ids(name="Frontier") == ["frontier"]
    assert await ids(description="mi250x") == ["frontier"]
    assert await ids(offset=2, limit=3) == everything[2:5]
    assert await ids(limit=0) == []
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    assert await ids(modified_since=future) == []
    for bad in (
        {"resource_type": "compute"},
        {"current_status": "sideways"},
        {"limit": 1001},
        {"offset": -1},
        {"capability": "node-hours"},
        {"modified_since": "1700000000"},
        {"modified_since": "2026-02-21"},
    ):
        response = await client.get(V2 + "/status/resources", params=bad)
        assert response.status_code == 422, bad
        assert problem_of(response, official)["invalid_params"]


async def test_modified_since_on_single_objects_answers_not_modified(
    client: httpx.AsyncClient,
) -> None:
    future = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    past = "2000-01-01T00:00:00Z"
    for path in ("/facility", "/facility/sites/local", "/account/capabilities/local"):
        assert (await client.get(V2 + path, params={"modified_since": future})).status_code == 304
        assert (await client.get(V2 + path, params={"modified_since": past})).status_code == 200
    for path in ("/facility/sites", "/account/capabilities"):
        assert (await client.get(V2 + path, params={"modified_since": future})).json() == []
        assert (await client.get(V2 + path, params={"modified_since": past})).json()


@pytest.mark.parametrize(
    "path",
    [
        "/facility/sites/nowhere",
        "/status/resources/nothing",
        "/status/incidents/outage-local",
        "/status/events/outage-local-declared",
        "/account/capabilities/nothing",
        "/account/projects/proj2",
        "/account/projects/proj2/project_allocations",
        "/account/projects/proj1/project_allocations/proj2:local",
        "/account/projects/proj1/project_allocations/proj1:nothing/user_allocations",
        "/account/projects/proj1/project_allocations/proj1:local/user_allocations/proj1:local:bob",
    ],
)
async def test_unknown_objects_are_404_problems(
    client: httpx.AsyncClient, token: str, official: OfficialSchemas, path: str
) -> None:
    response = await client.get(V2 + path, headers=auth(token))
    assert response.status_code == 404, response.text
    problem_of(response, official)


async def test_projects_are_the_callers_token_projects(
    fleet: tuple[httpx.AsyncClient, str], official: OfficialSchemas
) -> None:
    client, token = fleet
    projects = (await client.get(V2 + "/account/projects", headers=auth(token))).json()
    official.check("Project", projects, array=True)
    assert [p["id"] for p in projects] == ["proj1", "proj2"]
    assert all(p["user_ids"] == ["alice"] for p in projects)

    allocations = (
        await client.get(V2 + "/account/projects/proj2/project_allocations", headers=auth(token))
    ).json()
    official.check("ProjectAllocation", allocations, array=True)
    resources = [r["id"] for r in (await client.get(V2 + "/status/resources")).json()]
    assert [a["id"] for a in allocations] == [f"proj2:{r}" for r in resources]
    assert all(a["entries"] == [] and a["attributes"]["limits_known"] is False for a in allocations)
    users = (
        await client.get(
            V2 + "/account/projects/proj2/project_allocations/proj2:frontier/user_allocations",
            headers=auth(token),
        )
    ).json()
    official.check("UserAllocation", users, array=True)
    assert [(u["id"], u["user_id"]) for u in users] == [("proj2:frontier:alice", "alice")]
    assert users[0]["project_allocation_uri"] == (
        f"http://test{V2}/account/projects/proj2/project_allocations/proj2:frontier"
    )


async def test_a_token_without_projects_lists_none(app: FastAPI, client: httpx.AsyncClient) -> None:
    admin = app.state.tokens.issue("root", [])
    response = await client.get(V2 + "/account/projects", headers=auth(admin))
    assert response.status_code == 200 and response.json() == []
    missing = await client.get(V2 + "/account/projects/proj1", headers=auth(admin))
    assert missing.status_code == 404


async def test_capabilities_are_one_per_compute_resource(
    fleet: tuple[httpx.AsyncClient, str], official: OfficialSchemas
) -> None:
    client, _ = fleet
    capabilities = (await client.get(V2 + "/account/capabilities")).json()
    official.check("Capability", capabilities, array=True)
    resources = (await client.get(V2 + "/status/resources")).json()
    assert [c["id"] for c in capabilities] == [r["id"] for r in resources]
    assert all(c["units"] == [NODE_HOURS] for c in capabilities)
    named = await client.get(V2 + "/account/capabilities", params={"name": "Frontier"})
    assert [c["id"] for c in named.json()] == ["frontier"]
    assert (
        await client.get(V2 + "/account/capabilities", params={"offset": 1001})
    ).status_code == 422


def test_the_official_validators_are_not_vacuous(official: OfficialSchemas) -> None:
    site = {
        "id": "s",
        "last_modified": "2026-02-21T12:00:00Z",
        "operating_organization": None,
        "self_uri": "http://x/s",
        "resource_uris": [],
    }
    official.check("Site", site)
    for broken in (
        {k: v for k, v in site.items() if k != "operating_organization"},
        {**site, "last_modified": "yesterday"},
    ):
        with pytest.raises(AssertionError):
            official.check("Site", broken)
    with pytest.raises(AssertionError):
        official.check(
            "Capability", [{"id": "c", "units": ["node-hours"], "self_uri": "u"}], array=True
        )
