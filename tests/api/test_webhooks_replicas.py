"""Two real `serve` replicas on one PostgreSQL: the replica holding pending webhook deliveries
(mid-POST to a receiver that does not answer, and the outbox's lease) is killed with
`kill -9`; the other delivers every one of them, and the events made after the kill, once
the receiver answers. Each event reaches the receiver at least once; by delivery id, once."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx

from tests.support.serve import issue_token, running_serve
from tests.support.webhook_receiver import Receiver, until

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


def test_kill_9_of_the_replica_holding_deliveries_loses_none(
    tmp_path: Path, postgres_url: str
) -> None:
    receiver = Receiver().start()
    receiver.hold()  # POSTs read and never answered: the attempts stay in flight
    port = receiver.port
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
                lambda: len(listed(first.url)) >= 4 and len(receiver.held) >= 2,
                what="the queued events' deliveries pending, being sent by the first",
            )
            with running_serve(data, extra_env=env, log=tmp_path / "second.log") as second:
                assert all(d["status"] == "pending" for d in listed(second.url))
                os.kill(first.process.pid, signal.SIGKILL)
                first.process.wait(timeout=10)
                receiver.answer()
                until(
                    lambda: (
                        len(listed(second.url)) == 8
                        and all(d["status"] == "delivered" for d in listed(second.url))
                    ),
                    timeout=90,
                    what="every delivery (queued and completed of each job) delivered by the "
                    "survivor",
                )
                delivered = listed(second.url)
    finally:
        receiver.stop()
    by_id = receiver.verified({"/": subscription["secret"]})
    assert set(by_id) == {d["id"] for d in delivered}
    assert sorted((e["job_id"], e["state"]) for e in by_id.values()) == sorted(
        (job_id, state) for job_id in jobs for state in ("queued", "completed")
    )
