"""Graceful restarts (issue 27, item 6): a rolling restart under load loses no request and no
job, and a stopped `serve` drains, then exits 0.

The shape a facility runs on one host: `iri-gateway serve --workers 2` on PostgreSQL, and
`kill -HUP` of `serve` for a rolling restart (uvicorn's supervisor starts a new worker, waits
until it serves, then SIGTERMs an old one, which drains; one worker after the other). 16
clients, each the SDK's `GatewayClient` (which sends a launch again, with its
`Idempotency-Key`, after a connection error or a 502/503/504), launch jobs on the `local`
resource throughout. Every job appends its key to one file when it runs: the file says how
many times each launch reached the scheduler.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, select

from iri_gateway.client import GatewayClient
from iri_gateway.service.operations.schema import JobRow, LeaseRow, ReplicaRow
from tests.cli.test_serve_workers import live_workers, parent_of, wait_until, workers_if
from tests.support.serve import issue_token, running_serve

CLIENTS = 16
PACE = 1.0
"""Seconds a client waits between its launches: 16 launches a second in all, a busy site's
load, not a benchmark (the machine's two cores also start the new workers)."""
FINAL = ("completed", "failed", "canceled")


class Recording(httpx.HTTPTransport):
    """httpx's transport, noting every answer's status and every connection error: what
    the SDK saw before its retries hid it."""

    def __init__(self, seen: list[str]) -> None:
        super().__init__()
        self.seen = seen

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = super().handle_request(request)
        except httpx.TransportError as error:
            self.seen.append(f"connection error: {type(error).__name__}")
            raise
        self.seen.append(str(response.status_code))
        return response


def job(key: str, ran: Path) -> dict[str, Any]:
    return {"executable": "/bin/sh", "arguments": ["-c", f"echo {key} >> {ran}"]}


def test_a_rolling_restart_of_two_workers_under_load_loses_no_request_and_no_job(
    tmp_path: Path, postgres_url: str
) -> None:
    database = create_engine(postgres_url.replace("postgresql://", "postgresql+psycopg://", 1))
    data = tmp_path / "data"
    ran = tmp_path / "ran.log"
    token = issue_token(data, "alice", "p1")
    env = {
        "IRI_GATEWAY_DATABASE_URL": postgres_url,
        "IRI_GATEWAY_POLL_SLOW": "1",
        "IRI_GATEWAY_WRITE_RATE": "100000",  # the clients' rate is not what is tested
        "IRI_GATEWAY_DRAIN_TIMEOUT": "20",
    }
    launched: dict[str, str] = {}  # idempotency key -> job id
    seen: list[str] = []
    failures: list[BaseException] = []
    stop = threading.Event()
    lock = threading.Lock()

    def client() -> None:
        recording = Recording(seen)
        with GatewayClient(served.url, token, retries=10, transport=recording) as sdk:
            while not stop.is_set():
                key = str(uuid.uuid4())
                try:
                    answer = sdk.submit("local", job(key, ran), idempotency_key=key, project="p1")
                except BaseException as error:  # a launch lost: the test fails with it
                    failures.append(error)
                    return
                with lock:
                    launched[key] = answer.id
                time.sleep(PACE)

    try:
        with running_serve(
            data, args=("--workers", "2"), extra_env=env, workers=None, stop_timeout=60
        ) as served:
            serve_pid = served.process.pid
            first = wait_until(lambda: workers_if(database, serve_pid, 2), 60, "two workers")
            threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
            for thread in threads:
                thread.start()
            wait_until(lambda: len(launched) >= CLIENTS, 60, "the clients launching")

            served.process.send_signal(signal.SIGHUP)  # the rolling restart
            new = wait_until(
                lambda: (w := workers_if(database, serve_pid, 2)) and not set(w) & set(first) and w,
                120,
                f"both workers {sorted(first)} replaced",
            )
            during = len(launched)
            wait_until(lambda: len(launched) >= during + CLIENTS, 60, "launches after")
            stop.set()
            for thread in threads:
                thread.join(timeout=120)
            assert not failures, failures

            # the old workers drained: they said they stopped (leases and claims given up)
            with database.connect() as connection:
                stopped = dict(
                    connection.execute(
                        select(ReplicaRow.id, ReplicaRow.stopped_at).where(
                            ReplicaRow.id.in_(list(first.values()))
                        )
                    ).all()
                )
            assert all(stopped.get(replica) for replica in first.values()), stopped
            for pid in first:
                assert parent_of(pid) is None, f"old worker {pid} still runs"

            # every job tracked to its end by the new workers, which hold the leases now
            def all_final() -> bool:
                with database.connect() as connection:
                    states = connection.scalars(select(JobRow.state)).all()
                return all(state in FINAL for state in states)

            wait_until(all_final, 90, "every job finished")
            with database.connect() as connection:
                holders = set(connection.scalars(select(LeaseRow.holder)).all())
            assert holders and holders <= set(new.values()), (holders, new)

            served.process.send_signal(signal.SIGTERM)
            assert served.process.wait(timeout=60) == 0, served.output()
            assert "Received SIGHUP, restarting processes" in served.output()
        assert not live_workers(database, serve_pid)

        with database.connect() as connection:
            rows = connection.execute(select(JobRow.idempotency_key, JobRow.id, JobRow.state)).all()
    finally:
        stop.set()
        database.dispose()

    # no request lost, and none answered with a server error other than a retryable 503
    unexpected = [status for status in seen if status.startswith("5") and status != "503"]
    assert not unexpected, unexpected
    assert "500" not in seen
    # every launch is in the store once, is the job its client was given, and ran once
    assert len(rows) == len(launched), (len(rows), len(launched))
    assert {key: id_ for key, id_, _ in rows} == launched
    assert {state for _, _, state in rows} == {"completed"}, rows
    runs = ran.read_text().split()
    assert sorted(runs) == sorted(launched), "a launch ran twice or never"
