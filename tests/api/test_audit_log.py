"""The audit log through the app (ASGI): each kind of state-changing call leaves one record
with who, what, target, outcome and the echoed request id; refused calls are recorded as
refused; reads are not recorded; only admins read it, and its filters refuse bad input.

The real-serve test (with `iri-gateway audit` and the token commands) is
tests/api/test_audit_serve.py; the database's append-only rule, tests/service/operations/
test_audit_store.py.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from iri_gateway.api.app import create_app
from iri_gateway.service.operations.settings import Settings
from tests.api.test_filesystem import granted, local_profile

pytestmark = pytest.mark.anyio
V2 = "/api/v2"
AUDIT = f"{V2}/audit"


@pytest.fixture
def app(tmp_path: Path) -> FastAPI:
    """The `local` resource granting each user `<tmp_path>/granted/<user>` only."""
    profile = local_profile(tmp_path, f'["{tmp_path}/granted/{{user}}"]')
    return create_app(Settings(data_dir=tmp_path / "data", profiles=[profile]), run_poller=False)


def headers(token: str, request_id: str | None = None) -> dict[str, str]:
    sent = {"Authorization": f"Bearer {token}", "X-IRI-Facility-Project": "proj1"}
    if request_id is not None:
        sent["X-Request-ID"] = request_id
    return sent


async def records(client: httpx.AsyncClient, admin: str, **query: Any) -> list[dict[str, Any]]:
    page = await client.get(AUDIT, params={"limit": 200, **query}, headers=headers(admin))
    assert page.status_code == 200, page.text
    found: list[dict[str, Any]] = page.json()["records"]
    return found


def by_request(found: list[dict[str, Any]], request_id: str) -> dict[str, Any]:
    matching = [r for r in found if r["request_id"] == request_id]
    assert len(matching) == 1, (request_id, found)
    return matching[0]


async def test_each_kind_of_change_is_recorded_with_its_target_and_request_id(
    app: FastAPI, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    alice = app.state.tokens.issue("alice", ["proj1"])
    root = app.state.tokens.issue("root", admin=True)
    home = granted(tmp_path, "alice")
    (home / "old.txt").write_text("x")

    launched = await client.post(
        f"{V2}/compute/job/local",
        json={"executable": "/bin/sleep", "arguments": ["30"]},
        headers=headers(alice, "launch-1"),
    )
    assert launched.status_code == 200, launched.text
    assert launched.headers["X-Request-ID"] == "launch-1"
    job_id = launched.json()["id"]
    calls: list[tuple[str, str, dict[str, Any] | None, str]] = [
        ("PUT", f"/compute/job/local/{job_id}", {"executable": "/bin/sleep"}, "update-1"),
        ("DELETE", f"/compute/cancel/local/{job_id}", None, "cancel-1"),
        ("POST", f"/compute/restart/local/{job_id}", None, "restart-1"),
        ("DELETE", f"/compute/cancel/local/{job_id}", None, "cancel-2"),
        ("POST", "/filesystem/mkdir/local", {"path": f"{home}/made"}, "mkdir-1"),
        (
            "POST",
            "/filesystem/mv/local",
            {"path": f"{home}/old.txt", "target_path": f"{home}/new.txt"},
            "mv-1",
        ),
        ("POST", "/filesystem/chmod/local", {"path": f"{home}/new.txt", "mode": "600"}, "chmod-1"),
        ("POST", "/filesystem/rm/local", {"path": f"{home}/made", "recursive": True}, "rm-1"),
        ("PUT", "/compute/templates/hello", {"kind": "task", "executable": "/bin/true"}, "tpl-1"),
        ("DELETE", "/compute/templates/hello", None, "tpl-2"),
    ]
    for method, path, body, request_id in calls:
        answer = await client.request(
            method, V2 + path, json=body, headers=headers(alice, request_id)
        )
        assert answer.headers["X-Request-ID"] == request_id
        assert answer.status_code < 500, answer.text
    uploaded = await client.post(
        f"{V2}/filesystem/upload/local",
        params={"path": f"{home}/up.bin"},
        files={"file": ("up.bin", b"payload")},
        headers=headers(alice, "upload-1"),
    )
    assert uploaded.status_code == 200, uploaded.text
    copied = await client.post(
        f"{V2}/filesystem/cp/local",
        json={"path": f"{home}/up.bin", "target_path": f"{home}/copy.bin"},
        headers=headers(alice, "cp-1"),
    )
    assert copied.status_code == 201, copied.text
    task_id = copied.json()["task_id"]
    deleted = await client.delete(f"{V2}/task/{task_id}", headers=headers(alice, "task-1"))
    assert deleted.status_code == 200, deleted.text
    checked = await client.post(
        f"{V2}/facility/profile-check",
        json={"profile": "facility: {id: x}\n"},
        headers=headers(root, "check-1"),
    )
    assert checked.status_code in (200, 422), checked.text

    found = await records(client, root)
    launch = by_request(found, "launch-1")
    assert launch["user"] == "alice" and launch["admin"] is False
    assert launch["operation"] == "launchJob" and launch["resource_id"] == "local"
    assert launch["target"] == f"job {job_id}"
    assert launch["outcome"] == "succeeded" and launch["status"] == 200
    assert launch["error"] is None and launch["trace_id"] is None  # tracing is off
    expected = {
        "update-1": ("updateJob", f"job {job_id}"),
        "cancel-1": ("cancelJob", f"job {job_id}"),
        "restart-1": ("restartJob", f"job {job_id}"),
        "mkdir-1": ("mkdir", f"path {home}/made"),
        "mv-1": ("mv", f"path {home}/old.txt; target_path {home}/new.txt"),
        "chmod-1": ("chmod", f"path {home}/new.txt; mode 600"),
        "rm-1": ("rm", f"path {home}/made"),
        "tpl-1": ("putJobTemplate", "template hello"),
        "tpl-2": ("deleteJobTemplate", "template hello"),
        "upload-1": ("upload", f"path {home}/up.bin; task "),
        "cp-1": ("cp", f"path {home}/up.bin; target_path {home}/copy.bin; task {task_id}"),
        "task-1": ("deleteTask", f"task {task_id}"),
    }
    for request_id, (operation, target) in expected.items():
        record = by_request(found, request_id)
        assert record["operation"] == operation, record
        assert record["target"] is not None and record["target"].startswith(target), record
        assert record["user"] == "alice", record
    for request_id in ("mkdir-1", "mv-1", "chmod-1", "rm-1", "upload-1", "cp-1"):
        record = by_request(found, request_id)
        assert record["outcome"] == "succeeded", record
        assert "task " in record["target"], record  # the task the change was recorded as
    check = by_request(found, "check-1")
    assert check["operation"] == "checkProfile" and check["admin"] is True
    assert not (home / "made").exists() and (home / "new.txt").stat().st_mode & 0o777 == 0o600


async def test_refused_calls_are_recorded_as_refused_and_reads_are_not_recorded(
    app: FastAPI, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    alice = app.state.tokens.issue("alice", ["proj1"])
    bob = app.state.tokens.issue("bob", ["proj1"])
    root = app.state.tokens.issue("root", admin=True)
    home = granted(tmp_path, "alice")
    granted(tmp_path, "bob")
    # bob reaches into alice's folder (404: outside what he may use), sends a JobSpec
    # that is not one (422), tries an admin's operation (403) and reads the audit (403)
    outside = await client.post(
        f"{V2}/filesystem/mkdir/local", json={"path": f"{home}/x"}, headers=headers(bob, "b-1")
    )
    assert outside.status_code == 404, outside.text
    invalid = await client.post(
        f"{V2}/compute/job/local", json={"executable": 7}, headers=headers(bob, "b-2")
    )
    assert invalid.status_code == 422, invalid.text
    forbidden = await client.post(
        f"{V2}/facility/profile-check", json={"profile": "x"}, headers=headers(bob, "b-3")
    )
    assert forbidden.status_code == 403
    peek = await client.get(AUDIT, headers=headers(bob, "b-4"))
    assert peek.status_code == 403 and "records" not in peek.text
    assert "user 'bob' is not a facility admin" in peek.json()["detail"]
    # no token at all: a 401, not recorded (a stranger could fill the table)
    stranger = await client.post(
        f"{V2}/filesystem/mkdir/local", json={"path": "/tmp/x"}, headers={"X-Request-ID": "s-1"}
    )
    assert stranger.status_code == 401
    # reads: none of these is recorded
    for method, path, body in (
        ("GET", "/compute/jobs", None),
        ("POST", "/filesystem/ls/local", {"path": str(home)}),
        ("GET", "/compute/templates", None),
        ("GET", "/account/me", None),
    ):
        read = await client.request(
            method, V2 + path, json=body, headers=headers(alice, f"read-{path}")
        )
        assert read.status_code == 200, read.text
    await client.get(AUDIT, headers=headers(root, "admin-read"))

    found = await records(client, root)
    refusals = {r["request_id"]: r for r in found}
    assert set(refusals) == {"b-1", "b-2", "b-3", "b-4"}, found
    assert [refusals[k]["status"] for k in ("b-1", "b-2", "b-3", "b-4")] == [404, 422, 403, 403]
    assert all(r["outcome"] == "refused" and r["user"] == "bob" for r in found)
    assert refusals["b-1"]["target"] == f"path {home}/x"
    assert refusals["b-1"]["error"] == "Not Found"
    assert refusals["b-3"]["operation"] == "checkProfile"
    assert refusals["b-4"]["operation"] == "getAudit"


async def test_filters_pages_and_bad_queries(app: FastAPI, client: httpx.AsyncClient) -> None:
    root = app.state.tokens.issue("root", admin=True)
    users = {name: app.state.tokens.issue(name, ["proj1"]) for name in ("ann", "ben")}
    for number in range(5):
        for name, token in users.items():
            answer = await client.put(
                f"{V2}/compute/templates/t{number}",
                json={"kind": "task", "executable": "/bin/true"},
                headers=headers(token, f"{name}-{number}"),
            )
            assert answer.status_code in (200, 201), answer.text
    ann = await records(client, root, user="ann")
    assert [r["request_id"] for r in ann] == [f"ann-{n}" for n in (4, 3, 2, 1, 0)]  # newest first
    assert await records(client, root, operation="deleteJobTemplate") == []
    first = await client.get(AUDIT, params={"limit": 3}, headers=headers(root))
    second = await client.get(AUDIT, params={"limit": 3, "offset": 9}, headers=headers(root))
    assert first.json()["more"] is True and len(first.json()["records"]) == 3
    assert second.json()["more"] is False and len(second.json()["records"]) == 1
    newest = first.json()["records"][0]["time"]
    assert await records(client, root, since=newest) != []
    assert await records(client, root, until="2000-01-01T00:00:00Z") == []

    for query, field, words in (
        ({"since": "yesterday"}, "since", "datetime"),
        ({"until": "2026-01-01T00:00:00"}, "until", "timezone"),
        ({"limit": 10**9}, "limit", "200"),
        ({"offset": 10**30}, "offset", "1000000"),
        ({"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "until", "since"),
        ({"user": "x" * 256}, "user", "255"),
        ({"colour": "red"}, "colour", "unknown"),
    ):
        refused = await client.get(AUDIT, params=query, headers=headers(root))
        assert refused.status_code == 422, (query, refused.text)
        problem = refused.json()
        names = [p["name"] for p in problem["invalid_params"]]
        assert f"query.{field}" in names, (query, problem)
        assert words in str(problem), (query, problem)


async def test_a_record_that_cannot_be_written_is_logged_whole_and_the_call_still_answers(
    app: FastAPI,
    client: httpx.AsyncClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    alice = app.state.tokens.issue("alice", ["proj1"])
    home = granted(tmp_path, "alice")

    def broken(entry: object) -> int:
        raise OSError("disk full")

    monkeypatch.setattr(app.state.audit, "record", broken)
    with caplog.at_level(logging.ERROR):
        made = await client.post(
            f"{V2}/filesystem/mkdir/local",
            json={"path": f"{home}/kept"},
            headers=headers(alice, "lost-1"),
        )
    assert made.status_code == 201, made.text
    assert (home / "kept").is_dir()
    lost = [r for r in caplog.records if r.getMessage().startswith("audit record lost: ")]
    assert len(lost) == 1, caplog.text
    logged = json.loads(lost[0].getMessage().removeprefix("audit record lost: "))
    assert logged["request_id"] == "lost-1" and logged["operation"] == "mkdir"
    assert logged["user"] == "alice" and logged["target"].startswith(f"path {home}/kept")
    assert alice not in caplog.text
