"""Two real `serve` replicas on one PostgreSQL: the replica holding pending webhook deliveries
(mid-POST to a receiver that does not answer, and the outbox's lease) is killed with
`kill -9`; the other delivers every one of them, and the events made after the kill, once
the receiver answers. Each event reaches the receiver at least once; by delivery id, once."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from iri_gateway.service.webhooks import signing
from tests.support.serve import free_port, issue_token, running_serve

ENV = {
    "IRI_GATEWAY_WEBHOOK_ALLOWED_NETWORKS": '["127.0.0.0/8"]',
    "IRI_GATEWAY_WEBHOOK_HTTP_HOSTS": '["127.0.0.1"]',
    "IRI_GATEWAY_WEBHOOK_TIMEOUT": "1",
    "IRI_GATEWAY_WEBHOOK_CLAIM_TIME": "5",
    "IRI_GATEWAY_WEBHOOK_RETRY_FIRST": "0.3",
    "IRI_GATEWAY_WEBHOOK_RETRY_LONGEST": "1",
    "IRI_GATEWAY_WEBHOOK_POLL_INTERVAL": "0.1",
    "IRI_GATEWAY_REPLICA_TIMEOUT": "3",
    "IRI_GATEWAY_SETTLE_TIME": "5",
    "IRI_GATEWAY_POLL_FAST": "0.2",
    "IRI_GATEWAY_POLL_SLOW": "0.5",
}


def until(check: Callable[[], bool], timeout: float = 90, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout} s: {what}")


def test_kill_9_of_the_replica_holding_deliveries_loses_none(
    tmp_path: Path, postgres_url: str
) -> None:
    answering = threading.Event()  # until set, the receiver holds every POST unanswered
    got: list[tuple[dict[str, str], bytes]] = []
    held: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if not answering.is_set():
                held.append(self.headers["X-IRI-Delivery-ID"])
                answering.wait(30)  # the sender gives up after its 1 s time-out
                return
            got.append((dict(self.headers), body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    data = tmp_path / "data"
    token = issue_token(data, "alice", "proj1")
    headers = {"Authorization": f"Bearer {token}"}
    env = {**ENV, "IRI_GATEWAY_DATABASE_URL": postgres_url}
    try:
        with running_serve(data, extra_env=env, log=tmp_path / "first.log") as first:
            api = f"{first.url}/api/v2/compute"
            made = httpx.post(
                f"{api}/subscriptions",
                json={"url": f"http://127.0.0.1:{port}/", "events": ["queued", "completed"]},
                headers=headers,
                timeout=30,
            )
            assert made.status_code == 201, made.text
            subscription = made.json()
            jobs = []
            for index in range(4):
                launched = httpx.post(
                    f"{api}/job/local",
                    json={
                        "executable": "/bin/sleep",
                        "arguments": ["2"],
                        "name": f"held-{index}",
                        "attributes": {"account": "proj1"},
                    },
                    headers=headers,
                    timeout=30,
                )
                assert launched.status_code == 200, launched.text
                jobs.append(launched.json()["id"])

            def listed(url: str) -> list[dict[str, Any]]:
                answer = httpx.get(
                    f"{url}/api/v2/compute/subscriptions/{subscription['id']}/deliveries",
                    headers=headers,
                    timeout=30,
                )
                assert answer.status_code == 200, answer.text
                found: list[dict[str, Any]] = answer.json()
                return found

            until(
                lambda: len(listed(first.url)) >= 4 and len(held) >= 2,
                what="the queued events' deliveries pending, being sent by the first",
            )
            with running_serve(data, extra_env=env, log=tmp_path / "second.log") as second:
                assert all(d["status"] == "pending" for d in listed(second.url))
                os.kill(first.process.pid, signal.SIGKILL)
                first.process.wait(timeout=10)
                answering.set()
                until(
                    lambda: (
                        len(listed(second.url)) == 8
                        and all(d["status"] == "delivered" for d in listed(second.url))
                    ),
                    what="every delivery (queued and completed of each job) delivered by the "
                    "survivor",
                )
                delivered = listed(second.url)
    finally:
        answering.set()
        server.shutdown()
        server.server_close()
    by_id: dict[str, dict[str, Any]] = {}
    for headers_got, body in got:
        assert signing.verify(
            subscription["secret"], headers_got["X-IRI-Signature"], body, now=time.time()
        )
        by_id.setdefault(headers_got["X-IRI-Delivery-ID"], json.loads(body))
    assert set(by_id) == {d["id"] for d in delivered}
    assert sorted((e["job_id"], e["state"]) for e in by_id.values()) == sorted(
        (job_id, state) for job_id in jobs for state in ("queued", "completed")
    )
