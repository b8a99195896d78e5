"""The job event stream (`GET /api/v2/compute/events`, issue 28, item 1) of a real
`iri-gateway serve` on the `local` resource (its poller running, SQLite):

- a launched job's changes arrive in order, `new` to `completed`, each with its log id and
  the job as getJob shows it;
- a reconnect with `Last-Event-ID` (header or parameter) gets exactly the rest;
- another user's stream stays silent but for its keep-alives, even filtering on the job's id;
- bad resume points, filters and too many streams are refused with what is wrong.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.support.event_stream import Reader, event_stream
from tests.support.serve import issue_token, running_serve

API = "/api/v2"
FINAL = {"completed", "failed", "canceled"}


def reading(served: Served, token: str, **params: Any) -> AbstractContextManager[Reader]:
    return event_stream(served.url, token, **params)


@dataclass
class Served:
    """The module's serve and its users' tokens."""

    url: str
    tokens: dict[str, str]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("events") / "data"
    env = {
        "IRI_GATEWAY_EVENTS_HEARTBEAT": "0.5",
        "IRI_GATEWAY_EVENTS_STREAMS_PER_USER": "3",
        "IRI_GATEWAY_POLL_FAST": "0.2",
    }
    with running_serve(data, extra_env=env) as serve:
        tokens = {user: issue_token(data, user, "proj1") for user in ("alice", "bob", "carol")}
        yield Served(serve.url, tokens)


def token(served: Served, user: str) -> str:
    return served.tokens[user]


def launch(served: Served, user: str, *arguments: str) -> str:
    answer = httpx.post(
        f"{served.url}{API}/compute/job/local",
        json={"executable": "/bin/sh", "arguments": ["-c", *arguments]},
        headers={
            "Authorization": f"Bearer {token(served, user)}",
            "X-IRI-Facility-Project": "proj1",
        },
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    job_id: str = answer.json()["id"]
    return job_id


def ended(job_id: str) -> Any:
    return lambda got: any(
        f.data and f.data.get("job_id") == job_id and f.data["state"] in FINAL for f in got
    )


def test_a_jobs_changes_arrive_in_order_and_a_reconnect_gets_exactly_the_rest(
    served: Served,
) -> None:
    with reading(served, token(served, "alice")) as stream:
        assert stream.status == 200
        job_id = launch(served, "alice", "sleep 1")
        seen = [f for f in stream.events(ended(job_id)) if f.data and f.data["job_id"] == job_id]
    states = [f.data["state"] for f in seen if f.data]
    assert states[0] == "new" and states[-1] == "completed", states
    assert "queued" in states or "active" in states, states
    ids = [f.id for f in seen]
    assert all(isinstance(i, int) for i in ids) and ids == sorted(set(ids)), ids
    for frame in seen:
        assert frame.event == "job" and frame.data is not None
        assert frame.data["id"] == frame.id and frame.data["resource_id"] == "local"
        assert frame.data["job"]["id"] == job_id, "the job as getJob shows it"
    previous = [f.data["previous"] for f in seen if f.data]
    assert previous == [None, *states[:-1]], "each change names the state it left"
    lags = [f.arrived - f.data["time"] for f in seen if f.data]
    assert max(lags) < 2.0, f"seconds from the change's commit to the client: {lags}"

    # Resumed after the first event, by header and by parameter: exactly the rest.
    for how in ({"headers": {"Last-Event-ID": str(ids[0])}}, {"last_event_id": ids[0]}):
        with reading(served, token(served, "alice"), job_id=job_id, **how) as again:
            rest = again.events(lambda got: len(got) >= len(ids) - 1)
            time.sleep(0.3)
            assert again.frames.qsize() == 0 or all(
                f.comment is not None for f in list(again.frames.queue)
            ), "nothing more than the rest"
        assert [f.id for f in rest] == ids[1:]
        assert [f.data["state"] for f in rest if f.data] == states[1:]


def test_another_users_stream_stays_silent(served: Served) -> None:
    with (
        reading(served, token(served, "bob")) as bobs,
        reading(served, token(served, "alice")) as alices,
    ):
        job_id = launch(served, "alice", "true")
        alices.events(ended(job_id))
        with reading(served, token(served, "bob"), job_id=job_id, last_event_id=0) as targeted:
            time.sleep(1.5)  # three keep-alives' time: enough for any event to have come
            frames = list(targeted.frames.queue)
            assert frames and all(f.comment == "keep-alive" for f in frames), frames
        frames = list(bobs.frames.queue)
        assert frames and all(f.comment == "keep-alive" for f in frames), [
            (f.event, f.data) for f in frames
        ]


def test_filters_keep_only_what_was_asked(served: Served) -> None:
    with reading(served, token(served, "carol"), state=["completed", "failed"]) as finals:
        ok = launch(served, "carol", "true")
        bad = launch(served, "carol", "exit 3")
        got = finals.events(lambda got: {f.data["job_id"] for f in got if f.data} >= {ok, bad})
    states = {f.data["job_id"]: f.data["state"] for f in got if f.data}
    assert states == {ok: "completed", bad: "failed"}
    assert all(f.data and f.data["state"] in {"completed", "failed"} for f in got)


@pytest.mark.parametrize(
    ("params", "headers", "status", "named"),
    [
        ({}, {"Last-Event-ID": "abc"}, 400, "Last-Event-ID"),
        ({}, {"Last-Event-ID": "9" * 40}, 400, "Last-Event-ID"),
        ({"last_event_id": 3}, {"Last-Event-ID": "4"}, 400, "last_event_id"),
        ({"last_event_id": -1}, {}, 422, "last_event_id"),
        ({"resource": "nowhere"}, {}, 404, "nowhere"),
        ({"state": "bogus"}, {}, 422, "state"),
        ({"job_id": [f"j{i}" for i in range(101)]}, {}, 422, "job_id"),
        ({"since": 3}, {}, 422, "since"),
    ],
)
def test_bad_requests_are_refused_saying_what(
    served: Served, params: dict[str, Any], headers: dict[str, str], status: int, named: str
) -> None:
    answer = httpx.get(
        f"{served.url}{API}/compute/events",
        params=params,
        headers={"Authorization": f"Bearer {token(served, 'alice')}", **headers},
        timeout=30,
    )
    assert answer.status_code == status, answer.text
    assert named in answer.text


def test_without_a_token_nothing_is_streamed(served: Served) -> None:
    answer = httpx.get(f"{served.url}{API}/compute/events", timeout=30)
    assert answer.status_code == 401, answer.text


def test_a_user_past_the_stream_bound_is_told_so_and_the_slot_comes_back(
    served: Served,
) -> None:
    alice = token(served, "alice")
    with reading(served, alice), reading(served, alice), reading(served, alice):
        refused = httpx.get(
            f"{served.url}{API}/compute/events",
            headers={"Authorization": f"Bearer {alice}"},
            timeout=30,
        )
        assert refused.status_code == 429, refused.text
        assert "events_streams_per_user" in refused.text and refused.headers["Retry-After"]
        with reading(served, token(served, "bob")) as bobs:
            assert bobs.status == 200, "another user's bound is their own"
    deadline = time.monotonic() + 10
    while True:  # the server notices the closed streams at their next keep-alive
        with reading(served, alice) as again:
            if again.status == 200:
                break
        assert time.monotonic() < deadline, "the slots did not come back"
        time.sleep(0.3)


def test_an_arrays_elements_stream_their_own_changes(served: Served) -> None:
    """Each element's moves (its index, its exit code once it ended, no job document: there
    may be thousands), beside the array's own job events (which carry the job); another
    user sees none of them."""
    answer = httpx.post(
        f"{served.url}{API}/compute/job/local",
        json={
            "executable": "/bin/sh",
            "arguments": ["-c", "exit $IRI_ARRAY_INDEX"],
            "array": {"indices": "0-2"},
        },
        headers={
            "Authorization": f"Bearer {token(served, 'alice')}",
            "X-IRI-Facility-Project": "proj1",
        },
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    job_id = answer.json()["id"]
    with (
        reading(served, token(served, "alice"), job_id=job_id, last_event_id=0) as stream,
        reading(served, token(served, "bob"), job_id=job_id, last_event_id=0) as other,
    ):
        seen = stream.events(
            lambda got: len(finals_of(got, "element")) == 3 and bool(finals_of(got, "job"))
        )
        time.sleep(0.5)
        assert all(f.comment is not None for f in list(other.frames.queue)), "bob sees none"
    elements = [f.data for f in seen if f.event == "element" and f.data]
    finals = {e["element"]: (e["state"], e["message"]) for e in elements if e["state"] in FINAL}
    done = ("completed", "exit code 0")
    assert finals == {0: done, 1: ("failed", "exit code 1"), 2: ("failed", "exit code 2")}
    assert all("job" not in e and e["job_id"] == job_id for e in elements)
    jobs = [f.data for f in seen if f.event == "job" and f.data]
    assert jobs[-1]["state"] == "failed" and jobs[-1]["job"]["status"]["meta_data"]["array"][
        "counts"
    ] == {"completed": 1, "failed": 2}


def finals_of(frames: list[Any], kind: str) -> list[Any]:
    """The frames of `kind` (job, element...) that say a final state."""
    return [f for f in frames if f.event == kind and f.data and f.data["state"] in FINAL]
