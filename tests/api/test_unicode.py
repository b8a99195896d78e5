"""A lone surrogate in a JobSpec is bad input, not a server error (issue 11, item 7).

JSON can escape half a UTF-16 pair (`"\\ud800"`), which is no character: it used to reach
`model_dump_json` in negotiation (and could reach the store or a response), a plain-text 500
with a traceback. Every string of a JobSpec, keys included, is now refused with a 422
problem naming the field, on each operation that takes a JobSpec.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.anyio
V2 = "/api/v2"
HIGH, LOW = "\ud800", "\udfff"

# (JobSpec fields with a lone surrogate, the field the 422 names)
CASES: list[tuple[dict[str, Any], str]] = [
    ({"arguments": ["ok", f"a{HIGH}b"]}, "arguments[1]"),
    ({"environment": {f"NAME{HIGH}": "x"}}, "environment"),
    ({"environment": {"A": f"x{LOW}"}}, "environment.A"),
    (
        {"attributes": {"custom_attributes": {"comment": HIGH}}},
        "attributes.custom_attributes.comment",
    ),
    ({"attributes": {"custom_attributes": {f"mail{LOW}": "END"}}}, "attributes.custom_attributes"),
    ({"executable": f"/bin/{HIGH}"}, "executable"),
    ({"name": f"job{LOW}"}, "name"),
    ({"container": {"image": f"img{HIGH}"}}, "container.image"),
    ({"container": {"image": "i", "note": [HIGH]}}, "container"),
    ({"container": {"image": "i", "attributes": {"k": HIGH}}}, "container"),
    (
        {"roles": [{"name": "worker", "count": 1, "environment": {"X": LOW}}]},
        "roles[0].environment.X",
    ),
    ({HIGH: 1}, "(document)"),
]
OPERATIONS = ["launchJob", "updateJob", "planJob", "placeJob"]


def body(extra: dict[str, Any]) -> bytes:
    """JSON text with the surrogate escaped (`\\ud800`), as a client sends it."""
    return json.dumps({"executable": "/bin/echo", **extra}).encode("ascii")


async def send(
    client: httpx.AsyncClient, token: str, operation: str, content: bytes
) -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {token}",
        "X-IRI-Facility-Project": "proj1",
        "Content-Type": "application/json",
    }
    if operation == "updateJob":
        made = await client.post(
            f"{V2}/compute/job/local", json={"executable": "/bin/true"}, headers=headers
        )
        assert made.status_code == 200, made.text
        return await client.put(
            f"{V2}/compute/job/local/{made.json()['id']}", content=content, headers=headers
        )
    path = {
        "launchJob": "/compute/job/local",
        "planJob": "/compute/plan/local",
        "placeJob": "/compute/placement",
    }[operation]
    return await client.post(f"{V2}{path}", content=content, headers=headers)


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize(("extra", "field"), CASES, ids=[f for _, f in CASES])
async def test_a_lone_surrogate_is_a_422_naming_the_field(
    client: httpx.AsyncClient, token: str, operation: str, extra: dict[str, Any], field: str
) -> None:
    response = await send(client, token, operation, body(extra))
    assert response.status_code == 422, response.text[:500]
    assert response.headers["content-type"] == "application/problem+json"
    params = response.json()["invalid_params"]
    assert [p["name"] for p in params] == [field], params
    assert "lone surrogate" in params[0]["reason"]
