"""Our OpenAPI tells the truth about errors: what the server sends is what the document says.

For every operation of the document, the server is made to send errors (no token; unknown
resources, jobs and names; an invalid body; a refused project), and each answer's status
must be documented for that operation, its body valid against the documented schema
(jsonschema, Draft 2020-12, formats checked). The document is also compared with the
official spec's error responses.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from iri_gateway.api.export import openapi_document
from iri_gateway.api.plumbing.problems import PROBLEM

METHODS = ("get", "put", "post", "delete", "patch")
UNKNOWN = "no-such-thing"
KNOWN_RESOURCE = "local"

pytestmark = pytest.mark.anyio

NEVER_SENT: dict[int, str] = {
    304: "only the GET operations that honour If-Modified-Since send it (documented there)",
    405: "an operation's own method is always served at its path; a 405 answers another "
    "method, which the official spec documents under every operation but which is not a "
    "response of the operation",
    501: "every operation in the document is implemented",
    504: "an upstream that does not answer in time is a 503 with Retry-After here",
    400: "sent only by the operations whose bodies can ask for what cannot be (a project "
    "given twice or not at all, a directory where a file is needed)",
    403: "sent only where a project, an account on the resource or a role can be refused",
    409: "sent only where an object's state can refuse the change",
    503: "sent only where the database, the scheduler or the login node is used",
}
"""Statuses the official spec documents on every operation that ours documents only where
the server can send them (our document tells the truth), each with the reason."""


def excused(status: int, operation: dict[str, Any]) -> bool:
    """True when the operation cannot send `status` (NEVER_SENT; 401 needs security, 404 a
    path parameter, 422 a parameter or body)."""
    if status in NEVER_SENT:
        return True
    parameters = operation.get("parameters", [])
    return (
        (status == 401 and not operation.get("security"))
        or (status == 404 and not any(p["in"] == "path" for p in parameters))
        or (status == 422 and not parameters and "requestBody" not in operation)
    )


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    ]


def _validator(document: dict[str, Any], schema: dict[str, Any]) -> Draft202012Validator:
    root = {**schema, "components": document.get("components", {})}
    Draft202012Validator.check_schema(root)
    return Draft202012Validator(root, format_checker=Draft202012Validator.FORMAT_CHECKER)


def assert_documented(
    document: dict[str, Any], operation: dict[str, Any], answer: httpx.Response
) -> None:
    """The answer's status is documented for the operation, its body valid against it."""
    where = f"{operation['operationId']} answered {answer.status_code}"
    documented = operation["responses"].get(str(answer.status_code))
    assert documented is not None, f"{where}, undocumented: {answer.text[:300]}"
    media = answer.headers.get("content-type", "").split(";")[0].strip()
    if not answer.content:
        return
    content = documented.get("content", {})
    assert media in content, f"{where} as {media}; documented: {sorted(content)}"
    schema = content[media].get("schema")
    if schema:
        error = best_match(_validator(document, schema).iter_errors(answer.json()))
        assert error is None, f"{where}: {error.message} at {list(error.absolute_path)}"
    if answer.status_code == 401:
        assert "www-authenticate" in answer.headers
        assert "WWW-Authenticate" in documented["headers"]


def _path(path: str, operation: dict[str, Any], value: str, resource: str | None = None) -> str:
    for parameter in operation.get("parameters", []):
        if parameter["in"] == "path":
            name = parameter["name"]
            filled = resource if resource and name == "resource_id" else value
            path = path.replace("{" + name + "}", filled)
    return path


def _streams(operation: dict[str, Any]) -> bool:
    """Whether the operation's 200 is an endless `text/event-stream`."""
    content = operation.get("responses", {}).get("200", {}).get("content", {})
    return "text/event-stream" in content


@pytest.fixture
def document(app: FastAPI) -> dict[str, Any]:
    built: dict[str, Any] = app.openapi()
    return built


async def _every_case(
    client: httpx.AsyncClient, document: dict[str, Any], token: str
) -> list[tuple[dict[str, Any], httpx.Response]]:
    """The answers to the requests that make the server send errors, per operation."""
    bearer = {"Authorization": f"Bearer {token}"}
    answers = []
    for method, path, operation in operations(document):
        if _streams(operation):
            # A stream's 200 never ends: its error is asked for by an unknown filter.
            path = f"{path}?resource={UNKNOWN}"
        has_body = "requestBody" in operation
        cases: list[tuple[str, dict[str, str], Any]] = [
            (_path(path, operation, UNKNOWN), {}, {} if has_body else None),
            (_path(path, operation, UNKNOWN), bearer, {} if has_body else None),
            (_path(path, operation, UNKNOWN, KNOWN_RESOURCE), bearer, {} if has_body else None),
        ]
        if has_body:
            cases.append((_path(path, operation, UNKNOWN, KNOWN_RESOURCE), bearer, []))
        for url, headers, body in cases:
            content = json.dumps(body).encode() if body is not None else None
            answer = await client.request(
                method.upper(),
                url,
                headers={**headers, "Content-Type": "application/json"},
                content=content,
            )
            answers.append((operation, answer))
    return answers


async def test_every_error_the_server_sends_is_documented(
    client: httpx.AsyncClient, document: dict[str, Any], token: str
) -> None:
    answers = await _every_case(client, document, token)
    for operation, answer in answers:
        assert answer.status_code != 500, answer.text
        assert_documented(document, operation, answer)
    sent = {(op["operationId"], answer.status_code) for op, answer in answers}
    secured = [op["operationId"] for _, _, op in operations(document) if op.get("security")]
    assert {(op, 401) for op in secured} <= sent
    assert ("getSite", 404) in sent and ("getJob", 404) in sent and ("ls", 404) in sent
    assert ("launchJob", 422) in sent


async def test_a_refused_project_is_documented(
    client: httpx.AsyncClient, document: dict[str, Any], token: str
) -> None:
    operation = document["paths"]["/api/v2/compute/job/{resource_id}"]["post"]
    answer = await client.post(
        f"/api/v2/compute/job/{KNOWN_RESOURCE}",
        json={"executable": "/bin/true"},
        headers={"Authorization": f"Bearer {token}", "X-IRI-Facility-Project": "not-mine"},
    )
    assert answer.status_code == 403
    assert_documented(document, operation, answer)
    assert answer.json()["invalid_params"][0]["name"] == "X-IRI-Facility-Project"


async def test_a_bad_query_is_a_documented_problem(
    client: httpx.AsyncClient, document: dict[str, Any]
) -> None:
    """`?modified_since=` was documented as FastAPI's HTTPValidationError (`detail` an
    array) while the server sent a Problem."""
    answer = await client.get("/api/v2/facility", params={"modified_since": ""})
    assert answer.status_code == 422
    assert_documented(document, document["paths"]["/api/v2/facility"]["get"], answer)
    assert answer.json()["invalid_params"][0]["name"] == "query.modified_since"


def test_errors_are_problems_with_their_headers(document: dict[str, Any]) -> None:
    assert "HTTPValidationError" not in json.dumps(document)
    for _, _, operation in operations(document):
        for status, response in operation["responses"].items():
            if int(status) < 400 or operation["operationId"] == "getReadiness":
                continue
            schema = response["content"][PROBLEM]["schema"]
            assert "#/components/schemas/Problem" in json.dumps(schema), operation["operationId"]
            if status in ("429", "503"):
                assert "Retry-After" in response["headers"]
        assert "500" in operation["responses"]
        assert "405" not in operation["responses"]
        if operation.get("security"):
            assert "WWW-Authenticate" in operation["responses"]["401"]["headers"]
    ready = document["paths"]["/ready"]["get"]["responses"]["503"]
    assert "ReadinessReport" in json.dumps(ready)


def test_official_statuses_are_documented(
    document: dict[str, Any], official_spec: dict[str, Any]
) -> None:
    """Where the official spec documents an error for an operation we serve, ours does too,
    except the statuses in NEVER_SENT (each with its reason)."""
    ours = {op["operationId"]: op for _, _, op in operations(document)}
    missing = []
    for _, _, operation in operations(official_spec):
        mine = ours.get(operation["operationId"])
        if mine is None:
            continue
        for status in operation["responses"]:
            if status not in mine["responses"] and not excused(int(status), mine):
                missing.append((operation["operationId"], status))
    assert missing == [], missing


def test_no_parameter_is_published_as_nullable() -> None:
    """A query, path or header parameter is text or absent, never JSON null: published as
    `anyOf [T, null]`, Schemathesis 4.17.0 sent the text `null` for an optional enumeration
    (`GET /status/incidents?type=null`) and the server rightly refused a request the
    document allowed."""
    document = json.loads(openapi_document())
    nullable = [
        (path, method, parameter["name"])
        for path, item in document["paths"].items()
        for method, operation in item.items()
        for parameter in operation.get("parameters", [])
        if {"type": "null"} in parameter.get("schema", {}).get("anyOf", [])
        or parameter.get("schema", {}).get("type") == "null"
    ]
    assert nullable == []
    incidents = document["paths"]["/api/v2/status/incidents"]["get"]["parameters"]
    kind = next(p for p in incidents if p["name"] == "type")
    assert kind["required"] is False and kind["schema"]["$ref"].endswith("/IncidentType")
