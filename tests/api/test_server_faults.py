"""Faults of the server itself, said as problems.

A lock held past SQLite's busy time-out (5 s) once reached the client as a bare
"Internal Server Error" in text/plain. Now a database that does not take a request in time
is a transient fault: a 503 problem with Retry-After, in the database's own words, and the
refused request changed nothing. A bug is still a problem document (500), never plain text.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

pytestmark = pytest.mark.anyio

API = "/api/v2"


async def test_a_database_locked_past_its_time_out_is_a_retryable_503(
    app: FastAPI, client: httpx.AsyncClient, token: str, tmp_path: Path
) -> None:
    headers = {"Authorization": f"Bearer {token}", "X-IRI-Facility-Project": "proj1"}
    other = sqlite3.connect(tmp_path / "jobs.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another writer holds the database's lock
    try:
        answer = await client.post(
            f"{API}/compute/job/local", json={"executable": "/bin/true"}, headers=headers
        )
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert int(answer.headers["Retry-After"]) > 0
    problem = answer.json()
    assert problem["status"] == 503
    assert "database is locked" in problem["detail"] and "send it again" in problem["detail"]
    listed = await client.post(f"{API}/compute/status/local", headers=headers)
    assert listed.status_code == 200 and listed.json() == [], "nothing was recorded"


async def test_a_bug_is_a_500_problem_document_not_plain_text(app: FastAPI) -> None:
    @app.get("/fails")
    def fails() -> None:
        raise RuntimeError("a bug")

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        answer = await client.get("/fails")
    assert answer.status_code == 500
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert "RuntimeError" in answer.json()["detail"]
    assert "not of the request" in answer.json()["detail"]
    # Sent from outside the middleware, still with the headers of every answer (console.md)
    assert answer.headers["X-Frame-Options"] == "DENY"
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert "frame-ancestors 'none'" in answer.headers["Content-Security-Policy"]
