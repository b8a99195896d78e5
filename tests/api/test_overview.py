"""The every-resource extensions over HTTP (ASGI): all capabilities in one request, and the
caller's jobs on every resource one page at a time (only the caller's, counted likewise).

The app and client fixtures come from tests/api/conftest.py.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from ruamel.yaml import YAML

from iri_gateway.api.app import create_app
from iri_gateway.models.job import JobState
from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.service.operations.settings import Settings

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parent.parent.parent


def bearer(app: FastAPI, user: str, project: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {app.state.tokens.issue(user, [project])}",
        "X-IRI-Facility-Project": project,
    }


def two_sites(folder: Path) -> Path:
    """The shipped local profile with its resource twice, `site-a` and `site-b`."""
    profile = YAML(typ="safe").load((ROOT / "facility_profiles" / "local.yaml").read_text())
    template = profile["resources"][0]
    template["nodes"].pop("detect", None)
    profile["resources"] = []
    for name in ("site-a", "site-b"):
        resource = copy.deepcopy(template)
        resource["id"] = name
        profile["resources"].append(resource)
    path = folder / "two.yaml"
    YAML(typ="safe").dump(profile, path)
    return path


@pytest.fixture
async def sites(tmp_path: Path) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    app = create_app(
        Settings(data_dir=tmp_path / "data", profiles=[two_sites(tmp_path)]), run_poller=False
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield app, client


async def launch(
    client: httpx.AsyncClient, headers: dict[str, str], resource: str, name: str
) -> str:
    answer = await client.post(
        f"/api/v2/compute/job/{resource}",
        headers=headers,
        json={"executable": "/bin/true", "name": name},
    )
    assert answer.status_code == 200, answer.text
    job_id: str = answer.json()["id"]
    return job_id


async def page(client: httpx.AsyncClient, headers: dict[str, str], **params: str) -> dict[str, Any]:
    answer = await client.get("/api/v2/compute/jobs", params=params, headers=headers)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


@pytest.mark.parametrize("path", ["/api/v2/compute/capabilities", "/api/v2/compute/jobs"])
@pytest.mark.parametrize("token", [None, "not-a-token"])
async def test_the_overviews_need_a_valid_token(
    client: httpx.AsyncClient, path: str, token: str | None
) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    answer = await client.get(path, headers=headers)
    assert answer.status_code == 401
    assert answer.headers["content-type"] == "application/problem+json"


async def test_every_capability_in_one_request_as_each_alone(tmp_path: Path) -> None:
    app = create_app(
        Settings(data_dir=tmp_path, profiles=ProfileRegistry.builtin_files()), run_poller=False
    )
    headers = {"Authorization": f"Bearer {app.state.tokens.issue('alice', ['proj1'])}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        listed = await client.get("/api/v2/compute/capabilities", headers=headers)
        assert listed.status_code == 200, listed.text
        resources = (await client.get("/api/v2/status/resources")).json()
        assert len(resources) > 3
        alone = [
            (await client.get(f"/api/v2/compute/capabilities/{r['id']}", headers=headers)).json()
            for r in resources
        ]
    assert listed.json() == alone, "the same documents, in the order of /status/resources"


async def test_jobs_are_paged_newest_first_across_resources(
    sites: tuple[FastAPI, httpx.AsyncClient],
) -> None:
    app, client = sites
    alice = bearer(app, "alice", "proj1")
    launched = [
        await launch(client, alice, resource, f"job-{n}")
        for n, resource in enumerate(["site-a", "site-b"] * 3)
    ]
    newest_first = launched[::-1]

    first = await page(client, alice, limit="4")
    assert (first["total"], first["offset"], first["limit"]) == (6, 0, 4)
    assert [j["id"] for j in first["jobs"]] == newest_first[:4]
    assert {j["status"]["meta_data"]["resource_id"] for j in first["jobs"]} == {"site-a", "site-b"}
    assert "job_spec" not in first["jobs"][0], "the JobSpec only with include_spec"
    second = await page(client, alice, limit="4", offset="4", include_spec="true")
    assert (second["total"], second["offset"]) == (6, 4)
    assert [j["id"] for j in second["jobs"]] == newest_first[4:]
    assert [j["job_spec"]["name"] for j in second["jobs"]] == ["job-1", "job-0"]
    past = await page(client, alice, offset="6")
    assert (past["total"], past["jobs"]) == (6, [])
    # Each job as getJob shows it.
    alone = (await client.get(f"/api/v2/compute/status/site-b/{launched[5]}", headers=alice)).json()
    assert first["jobs"][0] == alone


async def test_another_users_jobs_are_neither_listed_nor_counted(
    sites: tuple[FastAPI, httpx.AsyncClient],
) -> None:
    app, client = sites
    alice, bob = bearer(app, "alice", "proj1"), bearer(app, "bob", "proj1")
    alices = [await launch(client, alice, "site-a", "mine") for _ in range(2)]
    bobs = [await launch(client, bob, resource, "mine") for resource in ("site-a", "site-b")]
    bobs.append(await launch(client, bob, "site-b", "mine"))

    for headers, own in ((alice, alices), (bob, bobs)):
        for params in ({}, {"state": "unfinished"}, {"text": "mine"}, {"limit": "1"}):
            shown = await page(client, headers, **params)
            assert shown["total"] == len(own), (params, shown["total"])
            assert {j["id"] for j in shown["jobs"]} <= set(own)
        assert {j["id"] for j in (await page(client, headers))["jobs"]} == set(own)
    other = await page(client, alice, text=bobs[0])
    assert (other["total"], other["jobs"]) == (0, []), "a job id of bob's finds nothing"


async def test_state_and_text_filters_apply_before_paging(
    sites: tuple[FastAPI, httpx.AsyncClient],
) -> None:
    app, client = sites
    alice = bearer(app, "alice", "proj1")
    ids = {
        name: await launch(client, alice, resource, name)
        for name, resource in (
            ("Alpha-1", "site-a"),
            ("beta", "site-b"),
            ("alpha-2", "site-b"),
            ("50%_off", "site-a"),
        )
    }
    store = app.state.engine.store
    store.transition(ids["Alpha-1"], JobState.COMPLETED, "done")
    store.transition(ids["beta"], JobState.FAILED, "broken")

    finished = await page(client, alice, state="finished", limit="1")
    assert finished["total"] == 2
    assert [j["id"] for j in finished["jobs"]] == [ids["beta"]]
    unfinished = await page(client, alice, state="unfinished")
    assert [j["id"] for j in unfinished["jobs"]] == [ids["50%_off"], ids["alpha-2"]]
    named = await page(client, alice, text="ALPHA")
    assert (named["total"], [j["id"] for j in named["jobs"]]) == (
        2,
        [ids["alpha-2"], ids["Alpha-1"]],
    ), "any case, across resources"
    both = await page(client, alice, text="alpha", state="finished")
    assert [j["id"] for j in both["jobs"]] == [ids["Alpha-1"]]
    by_id = await page(client, alice, text=ids["beta"][:8].upper())
    assert [j["id"] for j in by_id["jobs"]] == [ids["beta"]]
    for wildcard in ("%", "_"):
        literal = await page(client, alice, text=wildcard)
        assert [j["id"] for j in literal["jobs"]] == [ids["50%_off"]], (
            f"{wildcard!r} is a character, not a pattern"
        )


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "201"}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"offset": "-1"}, "offset"),
        ({"state": "running"}, "state"),
        ({"text": "x" * 201}, "text"),
        ({"include_spec": "maybe"}, "include_spec"),
    ],
)
async def test_bad_paging_is_a_problem_naming_the_parameter(
    app: FastAPI, client: httpx.AsyncClient, token: str, params: dict[str, str], field: str
) -> None:
    answer = await client.get(
        "/api/v2/compute/jobs", params=params, headers={"Authorization": f"Bearer {token}"}
    )
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    names = [p["name"] for p in answer.json()["invalid_params"]]
    assert any(name.split(".")[-1] == field for name in names), names


def test_the_overviews_are_documented_extensions_with_their_bounds(app: FastAPI) -> None:
    paths = app.openapi()["paths"]
    every = paths["/api/v2/compute/capabilities"]["get"]
    jobs = paths["/api/v2/compute/jobs"]["get"]
    for operation in (every, jobs):
        assert operation["tags"] == ["extensions"]
        assert "(extension)" in operation["summary"]
        assert operation["description"].startswith("Extension:")
        assert {"200", "401"} <= set(operation["responses"])
    assert "422" in jobs["responses"]
    schemas = {p["name"]: p["schema"] for p in jobs["parameters"]}
    assert (schemas["limit"]["minimum"], schemas["limit"]["maximum"]) == (1, 200)
    assert schemas["offset"]["minimum"] == 0
    assert schemas["text"]["maxLength"] == 200 and "anyOf" not in schemas["text"]
