"""Size limits (issue 11, item 6): request bodies (413, against a real serve, with and without
Content-Length) and JobSpec fields (422 naming the field), as the OpenAPI document and the
capabilities state them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from iri_gateway.models.limits import (
    MAX_ARGUMENT_LENGTH,
    MAX_ARGUMENTS,
    MAX_ENV_VALUE_LENGTH,
    MAX_ENVIRONMENT,
    MAX_ITEMS,
    MAX_NAME_LENGTH,
    MAX_SCRIPT_LENGTH,
    MAX_TEXT_LENGTH,
)
from tests.conftest import Server

pytestmark = pytest.mark.anyio
V2 = "/api/v2"
MIB = 1024 * 1024
TEN_MB_JOB = json.dumps({"executable": "/bin/echo", "arguments": ["x" * (10 * MIB)]}).encode()


def headers(token: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {token}",
        "X-IRI-Facility-Project": "proj1",
        "Content-Type": "application/json",
    }


def chunks(body: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    """The body as a stream: httpx sends it chunked, without Content-Length."""
    for start in range(0, len(body), size):
        yield body[start : start + size]


def job_count(server: Server) -> int:
    listed = httpx.post(
        f"{server.url}{V2}/compute/status/local",
        params={"historical": "true", "limit": 1000},
        headers=headers(server.token),
        timeout=30,
    )
    assert listed.status_code == 200, listed.text
    return len(listed.json())


@pytest.mark.parametrize("streamed", [False, True], ids=["content-length", "chunked"])
def test_a_10_mb_body_is_refused_413(server: Server, streamed: bool) -> None:
    before = job_count(server)
    content: bytes | Iterator[bytes] = chunks(TEN_MB_JOB) if streamed else TEN_MB_JOB
    response = httpx.post(
        f"{server.url}{V2}/compute/job/local",
        content=content,
        headers=headers(server.token),
        timeout=60,
    )
    assert response.status_code == 413, response.text[:500]
    assert ("content-length" in response.request.headers) is not streamed
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["title"] == "Content Too Large"
    assert f"{MIB} bytes" in problem["detail"] and "max_request_bytes" in problem["detail"]
    assert job_count(server) == before, "nothing was stored"
    after = httpx.post(
        f"{server.url}{V2}/compute/plan/local",
        json={"executable": "/bin/true"},
        headers=headers(server.token),
        timeout=30,
    )
    assert after.status_code == 200, "the server goes on serving"


def too_long(length: int) -> str:
    return "x" * (length + 1)


# (JobSpec over one limit, the field the 422 names, the limit its reason states); every one
# under the 1 MiB body limit.
OVER_LIMITS: list[tuple[dict[str, Any], str, int]] = [
    ({"arguments": ["a"] * (MAX_ARGUMENTS + 1)}, "arguments", MAX_ARGUMENTS),
    ({"arguments": ["ok", too_long(MAX_ARGUMENT_LENGTH)]}, "arguments[1]", MAX_ARGUMENT_LENGTH),
    (
        {"environment": {f"V{i}": "1" for i in range(MAX_ENVIRONMENT + 1)}},
        "environment",
        MAX_ENVIRONMENT,
    ),
    ({"environment": {too_long(MAX_NAME_LENGTH): "1"}}, "environment", MAX_NAME_LENGTH),
    ({"environment": {"V": too_long(MAX_ENV_VALUE_LENGTH)}}, "environment.V", MAX_ENV_VALUE_LENGTH),
    (
        {"attributes": {"custom_attributes": {"comment": too_long(MAX_TEXT_LENGTH)}}},
        "attributes.custom_attributes.comment",
        MAX_TEXT_LENGTH,
    ),
    (
        {"attributes": {"custom_attributes": {f"k{i}": "v" for i in range(MAX_ITEMS + 1)}}},
        "attributes.custom_attributes",
        MAX_ITEMS,
    ),
    ({"name": too_long(MAX_TEXT_LENGTH)}, "name", MAX_TEXT_LENGTH),
    ({"directory": "/" + too_long(MAX_TEXT_LENGTH)}, "directory", MAX_TEXT_LENGTH),
    ({"pre_launch": too_long(MAX_SCRIPT_LENGTH)}, "pre_launch", MAX_SCRIPT_LENGTH),
    ({"container": {"image": too_long(MAX_TEXT_LENGTH)}}, "container.image", MAX_TEXT_LENGTH),
    (
        {
            "container": {
                "image": "i",
                "volume_mounts": [{"source": "/s", "target": "/t"}] * (MAX_ITEMS + 1),
            }
        },
        "container.volume_mounts",
        MAX_ITEMS,
    ),
    (
        {"container": {"image": "i", "extra_options": {"podman": [too_long(MAX_TEXT_LENGTH)]}}},
        "container.extra_options.podman[0]",
        MAX_TEXT_LENGTH,
    ),
    (
        {"roles": [{"name": "worker", "count": 1, "arguments": [too_long(MAX_ARGUMENT_LENGTH)]}]},
        "roles[0].arguments[0]",
        MAX_ARGUMENT_LENGTH,
    ),
]


@pytest.mark.parametrize(
    ("extra", "field", "limit"), OVER_LIMITS, ids=[f for _, f, _ in OVER_LIMITS]
)
async def test_a_jobspec_over_a_limit_is_refused_naming_the_field(
    client: httpx.AsyncClient, token: str, extra: dict[str, Any], field: str, limit: int
) -> None:
    document = {"executable": "/bin/echo", **extra}
    response = await client.post(f"{V2}/compute/job/local", json=document, headers=headers(token))
    assert response.status_code == 422, response.text[:500]
    assert response.headers["content-type"] == "application/problem+json"
    params = response.json()["invalid_params"]
    assert [p["name"] for p in params] == [field], params
    assert f"at most {limit}" in params[0]["reason"], params


async def test_a_jobspec_at_the_limits_is_accepted(client: httpx.AsyncClient, token: str) -> None:
    document = {
        "executable": "/bin/echo",
        "arguments": ["a"] * (MAX_ARGUMENTS - 1) + ["x" * MAX_ARGUMENT_LENGTH],
        "environment": {"V" * MAX_NAME_LENGTH: "x" * MAX_ENV_VALUE_LENGTH},
        "name": "n" * MAX_TEXT_LENGTH,
    }
    response = await client.post(f"{V2}/compute/plan/local", json=document, headers=headers(token))
    assert response.status_code == 200, response.text[:500]


def test_the_openapi_document_states_the_limits(app: FastAPI) -> None:
    schemas = app.openapi()["components"]["schemas"]
    spec = schemas["JobSpec"]["properties"]
    assert spec["arguments"]["maxItems"] == MAX_ARGUMENTS
    assert spec["arguments"]["items"]["maxLength"] == MAX_ARGUMENT_LENGTH
    assert spec["environment"]["maxProperties"] == MAX_ENVIRONMENT
    assert spec["environment"]["propertyNames"] == {"maxLength": MAX_NAME_LENGTH}
    assert spec["environment"]["additionalProperties"]["maxLength"] == MAX_ENV_VALUE_LENGTH
    custom = schemas["JobAttributes"]["properties"]["custom_attributes"]
    assert custom["maxProperties"] == MAX_ITEMS
    assert custom["additionalProperties"]["maxLength"] == MAX_TEXT_LENGTH
    image = schemas["Container"]["properties"]["image"]["anyOf"][0]
    assert image["maxLength"] == MAX_TEXT_LENGTH
    assert f"at most {MAX_ARGUMENTS} arguments" in spec["arguments"]["description"]


async def test_capabilities_show_the_limits(
    client: httpx.AsyncClient, token: str, app: FastAPI
) -> None:
    response = await client.get(f"{V2}/compute/capabilities/local", headers=headers(token))
    assert response.status_code == 200
    document = response.json()
    assert document["max_request_bytes"] == app.state.settings.max_request_bytes == MIB
    assert document["jobspec_limits"]["max_arguments"] == MAX_ARGUMENTS
    assert document["jobspec_limits"]["max_env_value_length"] == MAX_ENV_VALUE_LENGTH
