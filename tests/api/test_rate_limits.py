"""Per-user request rate limits and quotas, on real `iri-gateway serve` processes.

One serve (SQLite): alice past her read rate is answered 429 with an integer `Retry-After`
and a problem naming the limit, its value, her use and when to retry; bob is still served,
her writes have a budget of their own (the POSTs that only look, `ls` or `planJob`, are
reads), `/health` is never limited, an unauthenticated
request is a 401, and after `Retry-After` seconds alice is served again. Two serves on one
fresh PostgreSQL: requests split over both hit 429 at about the one limit, not at twice it.
Quotas: active jobs at launch and unfinished tasks are refused with 429 naming the limit
(with a `Retry-After`: a suggestion, 30 s for a launch, 5 s for a task),
and a resource's profile `limits` overrides the gateway's setting.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import httpx

from tests.api.task_site import token
from tests.api.test_filesystem import auth, local_profile
from tests.support.serve import issue_token, running_serve

V2 = "/api/v2"
PROBLEM = "application/problem+json"


def until_refused(send: Any, most: int = 100) -> tuple[int, httpx.Response]:
    """How many answers were 200 before the first 429 (and that 429)."""
    for served in range(most):
        answer = send()
        if answer.status_code == 429:
            return served, answer
        assert answer.status_code == 200, answer.text
    raise AssertionError(f"{most} requests served: no rate limit")


def assert_rate_problem(answer: httpx.Response, limit: str, value: float) -> int:
    """The 429 names the limit, its value, the use and when to retry; the pause."""
    assert answer.headers["content-type"].startswith(PROBLEM)
    retry_after = answer.headers["Retry-After"]
    assert retry_after.isdigit() and int(retry_after) >= 1, retry_after
    body = answer.json()
    assert body["status"] == 429 and body["title"] == "Too Many Requests"
    assert body["limit"] == limit and body["limit_value"] == value, body
    assert body["retry_after"] == int(retry_after)
    assert body["used"] >= value * body["window_seconds"] - 1, body
    assert f"try again in {retry_after} s" in body["detail"], body
    return int(retry_after)


def test_a_user_past_the_read_rate_waits_retry_after_and_others_are_served(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    alice, bob = (issue_token(data, user, "proj1") for user in ("alice", "bob"))
    env = {
        "IRI_GATEWAY_READ_RATE": "1",
        "IRI_GATEWAY_WRITE_RATE": "1",
        "IRI_GATEWAY_RATE_WINDOW": "5",
    }
    with (
        running_serve(data, extra_env=env) as served,
        httpx.Client(base_url=served.url, timeout=30) as http,
    ):
        for _ in range(10):  # not counted: nobody's
            assert http.get(f"{V2}/account/me").status_code == 401
        served_before, refused = until_refused(
            lambda: http.get(f"{V2}/account/me", headers=auth(alice))
        )
        assert 5 <= served_before <= 7, served_before
        pause = assert_rate_problem(refused, "read_rate", 1)
        assert pause <= 7, pause
        # Others are served; the health checks are never limited; writes have their own.
        assert http.get(f"{V2}/account/me", headers=auth(bob)).status_code == 200
        for _ in range(10):
            assert http.get("/health").status_code == 200
            assert http.get("/ready").status_code == 200
        # The POSTs that only look (ls, stat, planJob, ...) are reads: refused as well.
        for looking in (
            http.post(f"{V2}/filesystem/ls/local", headers=auth(alice), json={"path": "/tmp"}),
            http.post(
                f"{V2}/compute/plan/local", headers=auth(alice), json={"executable": "/bin/true"}
            ),
        ):
            assert looking.status_code == 429, looking.text
            assert looking.json()["limit"] == "read_rate"
        made = tmp_path / "made-while-reads-are-refused"
        mkdir = http.post(
            f"{V2}/filesystem/mkdir/local", headers=auth(alice), json={"path": str(made)}
        )
        assert mkdir.status_code == 201, mkdir.text
        assert made.is_dir()
        assert http.get(f"{V2}/account/me", headers=auth(alice)).status_code == 429
        time.sleep(pause)
        again = http.get(f"{V2}/account/me", headers=auth(alice))
        assert again.status_code == 200, again.text


def test_two_replicas_share_one_limit_per_user(tmp_path: Path, postgres_url: str) -> None:
    """30 reads per 30 s: alice's requests alternate between two serves on one database,
    about 10 a second; she is refused at about 30 in all (each serve alone would let 30
    through: 60), and then by both."""
    data = tmp_path / "data"
    data.mkdir()
    alice = issue_token(data, "alice", "proj1")
    env = {
        "IRI_GATEWAY_DATABASE_URL": postgres_url,
        "IRI_GATEWAY_READ_RATE": "1",
        "IRI_GATEWAY_RATE_WINDOW": "30",
        "IRI_GATEWAY_RATE_SYNC_INTERVAL": "0.2",
        "IRI_GATEWAY_TOKENS_FILE": str(data / "tokens.json"),
    }
    with (
        running_serve(tmp_path / "one", extra_env=env) as one,
        running_serve(tmp_path / "two", extra_env=env) as two,
    ):
        urls = (one.url, two.url)
        served: list[str] = []

        def send() -> httpx.Response:
            url = urls[len(served) % 2]
            answer = httpx.get(f"{url}{V2}/account/me", headers=auth(alice), timeout=30)
            if answer.status_code == 200:
                served.append(url)
            time.sleep(0.1)
            return answer

        before, refused = until_refused(send)
        assert_rate_problem(refused, "read_rate", 1)
        # 30 and what one replica let through before it heard of the other's (0.2 s and a
        # read of about 10 requests a second), and a window boundary's slide: well under 60.
        assert 28 <= before <= 40, before
        assert served.count(one.url) >= 10 and served.count(two.url) >= 10, served
        after = [
            httpx.get(f"{urls[n % 2]}{V2}/account/me", headers=auth(alice), timeout=30).status_code
            for n in range(10)
        ]
        assert after.count(429) >= 9, after


def launch(http: httpx.Client, user: str, key: str | None = None) -> httpx.Response:
    headers = {**auth(user), **({"Idempotency-Key": key} if key else {})}
    return http.post(
        f"{V2}/compute/job/local",
        headers=headers,
        json={"executable": "/bin/sleep", "arguments": ["60"]},
    )


def cancel_all(http: httpx.Client, user: str) -> None:
    """Cancel every job of `user`'s (the sleeping ones of a test)."""
    jobs = http.post(f"{V2}/compute/status/local", headers=auth(user), json={})
    assert jobs.status_code == 200, jobs.text
    for job in jobs.json():
        http.delete(f"{V2}/compute/cancel/local/{job['id']}", headers=auth(user))


QUOTA_PAUSE = {"active_jobs_per_user": 30, "tasks_per_user": 5}
"""The `Retry-After` of a quota's 429: a suggestion of when to look again."""


def assert_quota(answer: httpx.Response, limit: str, value: int, used: int) -> None:
    assert answer.status_code == 429, answer.text
    assert answer.headers["content-type"].startswith(PROBLEM)
    assert answer.headers["Retry-After"] == str(QUOTA_PAUSE[limit])
    body = answer.json()
    assert (body["limit"], body["limit_value"], body["used"]) == (limit, value, used), body
    assert body["retry_after"] == QUOTA_PAUSE[limit], body
    assert f"({limit}: {value})" in body["detail"], body


def test_active_jobs_quota_at_launch_and_a_retry_is_never_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    alice, bob = (issue_token(data, user, "proj1") for user in ("alice", "bob"))
    with (
        running_serve(data, extra_env={"IRI_GATEWAY_ACTIVE_JOBS_PER_USER": "2"}) as served,
        httpx.Client(base_url=served.url, timeout=30) as http,
    ):
        first = launch(http, alice, key="first")
        assert first.status_code == 200, first.text
        assert launch(http, alice).status_code == 200
        assert_quota(launch(http, alice), "active_jobs_per_user", 2, 2)
        replay = launch(http, alice, key="first")
        assert replay.status_code == 200 and replay.json()["id"] == first.json()["id"]
        assert launch(http, bob).status_code == 200
        limits = http.get(f"{V2}/account/limits", headers=auth(alice)).json()
        assert {
            "limit": "active_jobs_per_user",
            "resource_id": "local",
            "limit_value": 2,
            "used": 2,
        } in limits["quotas"], limits
        cancel = http.delete(f"{V2}/compute/cancel/local/{first.json()['id']}", headers=auth(alice))
        assert cancel.status_code in (200, 204), cancel.text
        deadline = time.monotonic() + 30
        while (answer := launch(http, alice)).status_code == 429:
            assert time.monotonic() < deadline, answer.text
            time.sleep(0.2)
        assert answer.status_code == 200, answer.text
        cancel_all(http, alice)


def test_a_resources_profile_limits_override_the_settings(tmp_path: Path) -> None:
    """`limits: {active_jobs_per_user: 1, tasks_per_user: 1}` on the local resource: one
    job, one unfinished task, though the settings allow 1000 and 32."""
    profile = local_profile(tmp_path, f'["{tmp_path}/granted/{{user}}"]')
    text = profile.read_text()
    profile.write_text(
        text.replace(
            "    files:\n",
            "    limits:\n      active_jobs_per_user: 1\n      tasks_per_user: 1\n    files:\n",
            1,
        )
    )
    home = tmp_path / "granted" / "alice"
    home.mkdir(parents=True)
    (home / "noise").write_bytes(os.urandom(8 * 1024 * 1024))
    tokens = tmp_path / "data" / "tokens.json"
    tokens.parent.mkdir()
    alice = token(tokens, "alice")
    with (
        running_serve(
            tmp_path / "data",
            args=("--profiles", str(profile)),
            extra_env={"IRI_GATEWAY_TOKENS_FILE": str(tokens)},
        ) as served,
        httpx.Client(base_url=served.url, timeout=30) as http,
    ):
        assert launch(http, alice).status_code == 200
        assert_quota(launch(http, alice), "active_jobs_per_user", 1, 1)
        body = {"path": str(home / "noise"), "compression": "urn:doe-iri:compression:xz"}
        first = http.post(
            f"{V2}/filesystem/compress/local",
            headers=auth(alice),
            json={**body, "target_path": str(home / "a.tar.xz")},
        )
        assert first.status_code == 201, first.text
        second = http.post(
            f"{V2}/filesystem/compress/local",
            headers=auth(alice),
            json={**body, "target_path": str(home / "b.tar.xz")},
        )
        assert_quota(second, "tasks_per_user", 1, 1)
        limits = http.get(f"{V2}/account/limits", headers=auth(alice)).json()
        assert {
            "limit": "tasks_per_user",
            "resource_id": "local",
            "limit_value": 1,
            "used": 1,
        } in limits["quotas"], limits
        http.delete(f"{V2}/task/{first.json()['task_id']}", headers=auth(alice))
        cancel_all(http, alice)
