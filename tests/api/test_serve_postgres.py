"""A whole `iri-gateway serve` keeps its jobs in a real PostgreSQL (`IRI_GATEWAY_DATABASE_URL`):
a job launched over HTTP runs, is tracked to its end, is stored in PostgreSQL (not in a SQLite
file), and is still there, with its state and output, after the server restarts."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

from tests.support.serve import issue_token, running_serve

V2 = "/api/v2"


def wait_final(url: str, headers: dict[str, str], job_id: str) -> dict[str, object]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        answer = httpx.get(f"{url}{V2}/compute/status/local/{job_id}", headers=headers, timeout=30)
        assert answer.status_code == 200, answer.text
        status = answer.json()["status"]
        if status["state"] in ("completed", "failed", "canceled"):
            return dict(status)
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not finish: {answer.text}")


def test_serve_on_postgresql_runs_tracks_and_keeps_jobs(tmp_path: Path, postgres_url: str) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    token = issue_token(data_dir, "alice", "p1")
    headers = {"Authorization": f"Bearer {token}", "X-IRI-Facility-Project": "p1"}
    env = {"IRI_GATEWAY_DATABASE_URL": postgres_url}
    job = {"executable": "/bin/sh", "arguments": ["-c", "echo from-postgres"]}
    with running_serve(data_dir, extra_env=env) as served:
        launched = httpx.post(
            f"{served.url}{V2}/compute/job/local", json=job, headers=headers, timeout=30
        )
        assert launched.status_code == 200, launched.text
        job_id = launched.json()["id"]
        status = wait_final(served.url, headers, job_id)
        assert status["state"] == "completed" and status["exit_code"] == 0, status

    assert not (data_dir / "jobs.db").exists(), "the jobs went to SQLite, not PostgreSQL"
    database = create_engine(postgres_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with database.connect() as connection:
            rows = connection.execute(text("SELECT id, owner, state FROM jobs")).all()
    finally:
        database.dispose()
    assert [(row.id, row.owner, row.state) for row in rows] == [(job_id, "alice", "completed")]

    with running_serve(data_dir, extra_env=env) as again:
        answer = httpx.get(
            f"{again.url}{V2}/compute/status/local/{job_id}", headers=headers, timeout=30
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"]["state"] == "completed"
        tail = httpx.post(
            f"{again.url}{V2}/filesystem/tail/local",
            headers=headers,
            json={"path": f"{job_id}/stdout.txt", "lines": 5},
            timeout=30,
        )
        assert tail.status_code == 200, tail.text
        task = httpx.get(
            f"{again.url}{V2}/task/{tail.json()['task_id']}", headers=headers, timeout=30
        )
        assert task.status_code == 200, task.text
        assert "from-postgres" in task.text, task.text
