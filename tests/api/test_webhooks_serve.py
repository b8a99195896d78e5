"""Webhooks end to end through a real `iri-gateway serve` (SQLite, the `local` resource): a
real HTTP receiver, down while the jobs run, gets each event once it is up (retries reach
it), every delivery signed; the job's own `notify` too; another user's receiver hears
nothing of them and another user sees none of the deliveries; SSRF targets refused by the
running server. The test allows 127.0.0.0/8 (and http to 127.0.0.1) through the settings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.serve import issue_token, running_serve
from tests.support.webhook_receiver import Receiver, until

WEBHOOK_ENV = {
    "IRI_GATEWAY_WEBHOOK_ALLOWED_NETWORKS": '["127.0.0.0/8"]',
    "IRI_GATEWAY_WEBHOOK_HTTP_HOSTS": '["127.0.0.1"]',
    "IRI_GATEWAY_WEBHOOK_RETRY_FIRST": "0.3",
    "IRI_GATEWAY_WEBHOOK_RETRY_LONGEST": "1",
    "IRI_GATEWAY_WEBHOOK_POLL_INTERVAL": "0.1",
    "IRI_GATEWAY_POLL_FAST": "0.2",
    "IRI_GATEWAY_POLL_SLOW": "0.5",
}


@pytest.fixture
def receivers() -> Iterator[tuple[Receiver, Receiver]]:
    alices, bobs = Receiver(), Receiver()
    yield alices, bobs
    alices.stop()
    bobs.stop()


def test_a_late_receiver_gets_each_event_once_signed(
    tmp_path: Path, receivers: tuple[Receiver, Receiver]
) -> None:
    alices, bobs = receivers
    data = tmp_path / "data"
    alice_token = issue_token(data, "alice", "proj1")
    bob_token = issue_token(data, "bob", "proj1")
    with running_serve(data, extra_env=WEBHOOK_ENV) as served:
        api = f"{served.url}/api/v2/compute"
        alice = httpx.Client(headers={"Authorization": f"Bearer {alice_token}"}, timeout=30)
        bob = httpx.Client(headers={"Authorization": f"Bearer {bob_token}"}, timeout=30)
        hook = f"http://127.0.0.1:{alices.port}"
        for url, reason in [
            ("https://169.254.169.254/latest/meta-data/", "link-local"),
            (f"http://localhost:{alices.port}/x", "plain http:// is not allowed"),
            ("https://[::ffff:127.0.0.2]/x", "https://[::ffff:127.0.0.2]"),
        ]:
            refused = alice.post(f"{api}/subscriptions", json={"url": url})
            if url.startswith("https://[::ffff:127"):  # allowed: 127.0.0.0/8 is allowed
                assert refused.status_code == 201, refused.text
                alice.delete(f"{api}/subscriptions/{refused.json()['id']}")
                continue
            assert refused.status_code == 400 and reason in refused.text, refused.text
        made = alice.post(
            f"{api}/subscriptions",
            json={"url": f"{hook}/sub", "events": ["queued", "completed"]},
        )
        assert made.status_code == 201, made.text
        subscription = made.json()
        notify_secret = alice.post(f"{api}/notify-secret").json()["secret"]
        bobs_sub = bob.post(f"{api}/subscriptions", json={"url": f"http://127.0.0.1:{bobs.port}/"})
        assert bobs_sub.status_code == 201
        bobs.start()
        jobs = []
        for index in range(3):
            launched = alice.post(
                f"{api}/job/local",
                json={
                    "executable": "/bin/true",
                    "name": f"hooked-{index}",
                    "attributes": {"account": "proj1"},
                    "notify": {"url": f"{hook}/notify"},
                },
            )
            assert launched.status_code == 200, launched.text
            jobs.append(launched.json()["id"])

        def deliveries() -> list[dict[str, Any]]:
            answer = alice.get(f"{api}/subscriptions/{subscription['id']}/deliveries")
            assert answer.status_code == 200, answer.text
            listed: list[dict[str, Any]] = answer.json()
            return listed

        until(
            lambda: len(deliveries()) == 6 and all(d["attempts"] >= 2 for d in deliveries()),
            what="six deliveries, each failed twice while the receiver is down",
        )
        failing = deliveries()[0]
        assert failing["status"] == "pending" and "ConnectError" in failing["last_error"]
        assert failing["next_attempt_at"] is not None and failing["last_status_code"] is None
        alices.start()
        until(
            lambda: all(d["status"] == "delivered" for d in deliveries()),
            what="every subscription delivery delivered once the receiver is up",
        )
        for job_id in jobs:
            until(
                lambda job_id=job_id: any(  # type: ignore[misc]
                    d["subscription_id"] is None and d["status"] == "delivered"
                    for d in alice.get(f"{api}/job/local/{job_id}/deliveries").json()
                ),
                what=f"job {job_id}'s notify delivered",
            )
            assert bob.get(f"{api}/job/local/{job_id}/deliveries").status_code == 404
        theirs = bob.get(f"{api}/subscriptions/{subscription['id']}/deliveries")
        assert theirs.status_code == 404
        mine = bob.get(f"{api}/subscriptions/{bobs_sub.json()['id']}/deliveries").json()
        assert mine == []
    got = alices.verified({"/sub": subscription["secret"], "/notify": notify_secret})
    by_path: dict[str, list[tuple[str, str]]] = {"/sub": [], "/notify": []}
    for path, headers, _ in alices.got:
        event = got[headers["X-IRI-Delivery-ID"]]
        by_path[path].append((event["job_id"], event["state"]))
    once = {path: sorted(set(pairs)) for path, pairs in by_path.items()}
    assert once["/sub"] == sorted((j, s) for j in jobs for s in ("queued", "completed"))
    assert once["/notify"] == sorted((j, "completed") for j in jobs)
    assert len(got) == 9  # six subscription deliveries and three notify ones, by id
    for event in got.values():
        assert event["job"]["id"] == event["job_id"]  # the job as getJob shows it
    assert bobs.got == []
