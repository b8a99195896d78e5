"""Requests are checked in the order a hostile caller cannot turn around (issue 23, item 8),
against a real `iri-gateway serve`, every operation taken from its own `/openapi.json` (so a
new route is covered without a change here):

- the caller first: no token is 401 whatever the body and query (a body that is not JSON,
  a query with an unknown and a repeated parameter), and a non-admin on an admin operation
  is 403 likewise; the admin's same request is then refused for its body;
- an unknown query parameter is a 422 naming it and listing the accepted ones, on every
  operation; the known ones still work, and the console's pages keep their own query;
- a path with a newline, a tab, `\\x01` or `\\x7f` is a 422 naming the field on every
  operation that takes a path (reads, writes, upload, download, a job's paths), and nothing
  is created.
"""

from __future__ import annotations

import getpass
import io
import re
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import APIRouter

from iri_gateway.api.plumbing.caller_first import CallerFirstRoute, require_caller_first
from iri_gateway.api.plumbing.deps import ADMIN_ONLY, PrincipalDep
from tests.api.transfer_helpers import V2, headers, tokens
from tests.support.serve import RunningServe, clean_env, running_serve

CONTROL = {"newline": "\n", "x01": "\x01", "x7f": "\x7f", "tab": "\t"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServe, str, str]]:
    """A serve (the built-in `local` profile, granting /tmp), alice's and an admin's tokens."""
    data = tmp_path_factory.mktemp("hygiene") / "data"
    alice = tokens(data, ("alice",))["alice"]
    admin = subprocess.run(
        [
            sys.executable,
            "-m",
            "iri_gateway",
            "token",
            "root",
            "--project",
            "proj1",
            "--admin",
            "--data-dir",
            str(data),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
        check=True,
    ).stdout.strip()
    with running_serve(data) as serve:
        yield serve, alice, admin


@pytest.fixture(scope="module")
def http(served: tuple[RunningServe, str, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served[0].url, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def operations(http: httpx.Client) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path with its parameters filled in, operation) of every served operation."""
    document = http.get("/openapi.json").json()
    found = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            filled = re.sub(r"\{resource_id\}", "local", path)
            found.append((method.upper(), re.sub(r"\{[^}]+\}", "x", filled), operation))
    assert len(found) > 50, found
    return found


def _query_names(operation: dict[str, Any]) -> list[str]:
    return sorted(p["name"] for p in operation.get("parameters", []) if p["in"] == "query")


JUNK_QUERY = "x-unknown=42&offset=abc&offset=def&path=a%0Ab"
"""An unknown parameter, one given twice, and a control character: each a 422 for a caller."""


def test_no_token_is_401_whatever_the_body_and_query(
    http: httpx.Client, operations: list[tuple[str, str, dict[str, Any]]]
) -> None:
    secured = [(m, p, o) for m, p, o in operations if "401" in o["responses"]]
    assert len(secured) > 40
    wrong = {}
    for method, path, operation in secured:
        content_types = list(operation.get("requestBody", {}).get("content", {}))
        kind = content_types[0] if content_types else "application/json"
        if kind == "multipart/form-data":
            kind += "; boundary=nothing-here"
        answer = http.request(
            method, f"{path}?{JUNK_QUERY}", content=b"{not json", headers={"Content-Type": kind}
        )
        if answer.status_code != 401 or answer.headers.get("WWW-Authenticate") != "Bearer":
            wrong[operation["operationId"]] = (answer.status_code, answer.text[:200])
    assert not wrong, wrong


def test_a_non_admin_is_403_on_admin_operations_whatever_the_body(
    http: httpx.Client,
    operations: list[tuple[str, str, dict[str, Any]]],
    served: tuple[RunningServe, str, str],
) -> None:
    _, alice, admin = served
    admin_only = [
        (m, p, o)
        for m, p, o in operations
        if o["responses"].get("403", {}).get("description") == ADMIN_ONLY["description"]
    ]
    assert [o["operationId"] for _, _, o in admin_only] == [
        "checkProfile",
        "getAudit",
        "getMetrics",
    ]
    for method, path, _ in [(m, p, o) for m, p, o in admin_only if "requestBody" in o]:
        for body in (b"{not json", b'{"profile": 42, "unknown": true}'):
            for query in (f"?{JUNK_QUERY}", ""):
                refused = http.request(
                    method,
                    path + query,
                    content=body,
                    headers=headers(alice, **{"Content-Type": "application/json"}),
                )
                assert refused.status_code == 403, refused.text
                assert "is not a facility admin" in refused.json()["detail"]
                # The admin's same request is refused for what it is, so the 403 above was
                # the caller check coming first, not a route that refuses everything.
                looked_at = http.request(
                    method,
                    path + query,
                    content=body,
                    headers=headers(admin, **{"Content-Type": "application/json"}),
                )
                assert looked_at.status_code in (400, 422), looked_at.text


def test_an_unknown_query_parameter_is_refused_on_every_operation(
    http: httpx.Client,
    operations: list[tuple[str, str, dict[str, Any]]],
    served: tuple[RunningServe, str, str],
) -> None:
    admin = served[2]  # may call every operation, admin-only ones included
    wrong = {}
    for method, path, operation in operations:
        assert operation.get("x-iri-gateway-unknown-query-parameters") == "refused"
        assert "422" in operation["responses"], operation["operationId"]
        answer = http.request(method, f"{path}?x-unknown=42&limt=3", headers=headers(admin))
        params = (
            {p["name"]: p["reason"] for p in answer.json().get("invalid_params", [])}
            if answer.headers.get("content-type", "").startswith("application/problem+json")
            else {}
        )
        accepted = _query_names(operation)
        reason = params.get("query.x-unknown", "")
        if (
            answer.status_code != 422
            or "query.limt" not in params
            or "unknown query parameter" not in reason
            or not all(name in reason for name in accepted)
            or (not accepted and "no query parameters" not in reason)
        ):
            wrong[operation["operationId"]] = (answer.status_code, answer.text[:300])
    assert not wrong, wrong


@pytest.mark.parametrize(
    "path",
    [
        "/api/v2/facility/sites?offset=0&limit=5&short_name=x",
        "/api/v2/status/incidents?offset=0&limit=5",
        "/api/v2/status/events?offset=0&limit=5",
        "/api/v2/account/capabilities?offset=0&limit=5",
        "/api/v2/compute/jobs?offset=0&limit=1&include_spec=true",
        "/api/v2/facility",
    ],
)
def test_known_query_parameters_still_work(
    http: httpx.Client, path: str, served: tuple[RunningServe, str, str]
) -> None:
    assert http.get(path, headers=headers(served[1])).status_code == 200
    assert http.head(path, headers=headers(served[1])).status_code == 200


def test_the_console_pages_keep_their_own_query(http: httpx.Client) -> None:
    page = http.get("/console/jobs?job=abc")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert http.get("/console/sign-in?next=%2Fconsole%2Fjobs").status_code == 200


@pytest.fixture
def folder() -> Iterator[Path]:
    """A fresh folder in the granted /tmp, holding a file `src` and an archive `src.tgz`."""
    path = Path("/tmp") / f"iri-hygiene-{uuid.uuid4().hex}"
    path.mkdir()
    (path / "src").write_text("data\n")
    with tarfile.open(path / "src.tgz", "w:gz") as archive:
        member = tarfile.TarInfo("member")
        member.size = 5
        archive.addfile(member, io.BytesIO(b"data\n"))
    yield path
    for item in sorted(path.rglob("*"), reverse=True):
        item.unlink() if not item.is_dir() or item.is_symlink() else item.rmdir()
    path.rmdir()


# (operation, the field that gets the bad path, the other fields as valid values; "{d}" is the
# test's folder). Every filesystem operation's path fields, and a job's.
PATH_FIELDS: list[tuple[str, str, dict[str, Any]]] = [
    *[
        (op, "path", {})
        for op in (
            "checksum",
            "download",
            "file",
            "head",
            "ls",
            "stat",
            "tail",
            "view",
            "mkdir",
            "rm",
        )
    ],
    ("chmod", "path", {"mode": "644"}),
    ("chown", "path", {"owner": getpass.getuser()}),
    ("cp", "path", {"target_path": "{d}/copy"}),
    ("cp", "target_path", {"path": "{d}/src"}),
    ("mv", "path", {"target_path": "{d}/moved"}),
    ("mv", "target_path", {"path": "{d}/src"}),
    ("compress", "path", {"target_path": "{d}/out.tgz"}),
    ("compress", "target_path", {"path": "{d}/src"}),
    ("extract", "path", {"target_path": "{d}/unpacked"}),
    ("extract", "target_path", {"path": "{d}/src.tgz"}),
    ("symlink", "path", {"link_path": "{d}/link"}),
    ("symlink", "link_path", {"path": "{d}/src"}),
    ("upload", "path", {}),
    *[
        ("launchJob", field, {"executable": "/bin/true", "directory": "{d}"})
        for field in ("directory", "stdout_path", "stderr_path", "stdin_path")
    ],
]


def _send(
    http: httpx.Client,
    token: str,
    operation: str,
    field: str,
    bad: str,
    others: dict[str, Any],
    folder: Path,
) -> httpx.Response:
    body = {
        name: value.replace("{d}", str(folder)) if isinstance(value, str) else value
        for name, value in others.items()
    }
    if operation == "upload":
        return http.post(
            f"{V2}/filesystem/upload/local",
            params={field: bad},
            content=b"x",
            headers=headers(token, **{"Content-Type": "application/octet-stream"}),
        )
    if operation == "launchJob":
        return http.post(
            f"{V2}/compute/job/local", json={**body, field: bad}, headers=headers(token)
        )
    return http.post(
        f"{V2}/filesystem/{operation}/local", json={**body, field: bad}, headers=headers(token)
    )


@pytest.mark.parametrize("char", sorted(CONTROL))
@pytest.mark.parametrize(
    ("operation", "field", "others"),
    PATH_FIELDS,
    ids=[f"{op}-{field}" for op, field, _ in PATH_FIELDS],
)
def test_a_control_character_in_a_path_is_refused_alike(
    http: httpx.Client,
    served: tuple[RunningServe, str, str],
    folder: Path,
    operation: str,
    field: str,
    others: dict[str, Any],
    char: str,
) -> None:
    before = sorted(p.name for p in folder.iterdir())
    bad = f"{folder}/bad{CONTROL[char]}name"
    answer = _send(http, served[1], operation, field, bad, others, folder)
    assert answer.status_code == 422, (answer.status_code, answer.text)
    params = {p["name"]: p["reason"] for p in answer.json()["invalid_params"]}
    assert field in params, params
    assert "control character" in params[field], params
    assert sorted(p.name for p in folder.iterdir()) == before


def test_a_router_made_without_the_caller_first_route_is_refused_at_start_up() -> None:
    """A new router that forgot `route_class=CallerFirstRoute` would read bodies before
    callers: building the app fails, naming its routes."""
    plain = APIRouter(prefix="/api/v2/new")

    @plain.post("/thing")
    async def thing(principal: PrincipalDep) -> None:
        """A route like any other."""

    with pytest.raises(TypeError, match=r"\['POST'\] /api/v2/new/thing"):
        require_caller_first(plain.routes)
    fixed = APIRouter(prefix="/api/v2/new", route_class=CallerFirstRoute)
    fixed.add_api_route("/thing", thing, methods=["POST"])
    require_caller_first(fixed.routes)
