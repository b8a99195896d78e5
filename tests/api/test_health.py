"""Liveness and readiness (`GET /health`, `GET /ready`) of real `iri-gateway serve` processes,
alone and as two replicas on one PostgreSQL database: a load balancer's view.

- /health answers without a token; /ready is 200 with this replica's figures once start-up is
  over, and 503 naming the database when the store's database stops taking connections.
- Two replicas: each resource is polled by exactly one of them; after `kill -9` of that one,
  the other polls it within the heartbeat timeout and the lease check.
- A second `serve` on one SQLite store is refused in one line naming the running one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.support.serve import clean_env, free_port, running_serve

FAST = {"IRI_GATEWAY_REPLICA_TIMEOUT": "2", "IRI_GATEWAY_SETTLE_TIME": "2"}


def ready(url: str) -> httpx.Response:
    return httpx.get(f"{url}/ready", timeout=30)


def wait_ready_until(url: str, condition: Any, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        answer = ready(url)
        body: dict[str, Any] = answer.json()
        if answer.status_code == 200 and condition(body):
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"/ready never met the condition: {answer.status_code} {body}")
        time.sleep(0.2)


def test_health_and_readiness_of_one_serve(tmp_path: Path) -> None:
    with running_serve(tmp_path / "data") as served:
        live = httpx.get(f"{served.url}/health", timeout=10)
        assert live.status_code == 200 and live.json() == {"status": "alive"}
        body = wait_ready_until(served.url, lambda b: b["details"]["polling"] == ["local"])
        assert body["status"] == "ready" and body["problems"] == []
        details = body["details"]
        assert details["pid"] == served.process.pid
        assert 0 <= details["heartbeat_age_seconds"] < 15
        assert details["poll_errors"] == {}


def test_readiness_fails_while_the_database_refuses_and_recovers(
    tmp_path: Path, postgres_url: str, postgres_server: str
) -> None:
    name = make_url(postgres_url).database
    admin = create_engine(postgres_server, isolation_level="AUTOCOMMIT")

    def database_accepts(accepts: bool) -> None:
        with admin.connect() as connection:
            connection.execute(
                text(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS {str(accepts).lower()}')
            )
            if not accepts:
                connection.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = :name"
                    ),
                    {"name": name},
                )

    try:
        with running_serve(
            tmp_path / "data", extra_env={"IRI_GATEWAY_DATABASE_URL": postgres_url}
        ) as served:
            wait_ready_until(served.url, lambda b: True)
            database_accepts(False)
            refused = ready(served.url)
            assert refused.status_code == 503, refused.text
            problems = refused.json()["problems"]
            assert any(f"/{name}" in p and "does not answer" in p for p in problems), problems
            assert all("password" not in p.lower() or "***" in p for p in problems)
            assert httpx.get(f"{served.url}/health", timeout=10).status_code == 200
            database_accepts(True)
            wait_ready_until(served.url, lambda b: b["problems"] == [])
    finally:
        database_accepts(True)
        admin.dispose()


def test_two_replicas_share_polling_and_the_survivor_takes_over_after_kill_9(
    tmp_path: Path, postgres_url: str
) -> None:
    env = {"IRI_GATEWAY_DATABASE_URL": postgres_url, **FAST}
    with running_serve(tmp_path / "first", extra_env=env) as first:
        wait_ready_until(first.url, lambda b: b["details"]["polling"] == ["local"])
        with running_serve(tmp_path / "second", extra_env=env) as second:
            body = wait_ready_until(second.url, lambda b: True)
            assert body["details"]["polling"] == [], "the first replica polls `local`"
            assert body["details"]["replica"] != ready(first.url).json()["details"]["replica"]
            os.kill(first.process.pid, signal.SIGKILL)
            first.process.wait(timeout=10)
            started = time.monotonic()
            wait_ready_until(second.url, lambda b: b["details"]["polling"] == ["local"], timeout=20)
            # heartbeat timeout (2 s; at once for a dead pid on this host) + lease check (5 s)
            assert time.monotonic() - started < 12


def test_a_second_serve_on_one_sqlite_store_is_refused_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with running_serve(data) as served:
        port = free_port()
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "iri_gateway",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--data-dir",
                str(data),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=clean_env(),
        )
        assert second.returncode != 0
        error = second.stderr.strip()
        assert f"pid {served.process.pid}" in error and "PostgreSQL" in error, error
        assert "Traceback" not in error, error
        assert httpx.get(f"{served.url}/health", timeout=10).status_code == 200
