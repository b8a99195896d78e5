"""The store's queries and transitions on SQLite and on a real PostgreSQL: find with filters
and paging, unsettled, transition_many, withdraw; and what a restart reads back."""

from __future__ import annotations

from itertools import count

import pytest

from iri_gateway.models.job import JobState
from iri_gateway.service.operations.store import MAX_SQL_OFFSET, JobFilters, JobStore, StateChange
from tests.conftest import stored_plan


def clocked_store(url: str) -> JobStore:
    """A store whose clock ticks one second per reading: creation order is the time order."""
    ticks = count(1000)
    return JobStore(url, clock=lambda: float(next(ticks)))


def make(
    store: JobStore,
    owner: str = "alice",
    resource: str = "local",
    name: str | None = None,
    key: str | None = None,
) -> str:
    spec = {"executable": "x", **({"name": name} if name else {})}
    return store.create(
        owner=owner,
        resource_id=resource,
        spec=spec,
        effective_spec=spec,
        plan=stored_plan(),
        script="true",
        idempotency_key=key,
    ).id


def test_find_filters_before_paging_oldest_first(database_url: str) -> None:
    store = clocked_store(database_url)
    alice = [make(store, name=f"n{i % 2}") for i in range(6)]
    make(store, owner="bob", name="n0")
    elsewhere = make(store, resource="other", name="n0")
    store.transition(alice[0], JobState.COMPLETED, "done", exit_code=0)
    ids = lambda records: [r.id for r in records]  # noqa: E731
    assert ids(store.find(owner="alice", resource_id="local")) == alice
    assert ids(store.find(owner="alice", name="n0")) == [alice[0], alice[2], alice[4], elsewhere]
    assert ids(store.find(owner="alice", name="n0", offset=1, limit=1)) == [alice[2]]
    assert ids(store.find(resource_id="other")) == [elsewhere]
    assert ids(store.find(owner="alice", states=[JobState.COMPLETED])) == [alice[0]]
    assert ids(store.find(owner="alice", resource_id="local", states=[JobState.NEW], offset=4)) == [
        alice[5]
    ]
    assert store.find(owner="alice", offset=MAX_SQL_OFFSET + 10) == []
    assert store.find(owner="carol") == []
    assert len(store.find()) == 8
    assert ids(store.find(name="no such name")) == []


def test_find_and_count_take_one_filter_set_and_refuse_an_unknown_filter(database_url: str) -> None:
    """`find` and `count` share `JobFilters`: the same dictionary gives a page and its total;
    a misspelt filter is a TypeError, never a filter dropped (which would match every job)."""
    store = clocked_store(database_url)
    mine = [make(store, name="n") for _ in range(3)]
    make(store, owner="bob", name="n")
    filters: JobFilters = {"owner": "alice", "name": "n"}
    assert [r.id for r in store.find(**filters)] == mine
    assert store.count(**filters) == 3
    with pytest.raises(TypeError, match="unknown job filters: ownr"):
        store.find(ownr="alice")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unknown job filters: ownr"):
        store.count(ownr="alice")  # type: ignore[call-arg]


def test_newest_first_text_and_count_agree_with_the_page(database_url: str) -> None:
    """The jobs page's query: every resource, newest first, a text in the name or the id (any
    case, `%` and `_` literal), and a count with the same filters."""
    store = clocked_store(database_url)
    alpha = make(store, name="Alpha")
    other = make(store, resource="other", name="alpha-2")
    odd = make(store, name="50%_off")
    bobs = make(store, owner="bob", name="alpha")
    store.transition(alpha, JobState.COMPLETED, "done", exit_code=0)
    ids = lambda records: [r.id for r in records]  # noqa: E731
    assert ids(store.find(owner="alice", newest_first=True)) == [odd, other, alpha]
    assert ids(store.find(owner="alice", newest_first=True, offset=1, limit=1)) == [other]
    assert ids(store.find(owner="alice", text="ALPHA", newest_first=True)) == [other, alpha]
    assert ids(store.find(owner="alice", text=other[:8].upper())) == [other]
    assert (
        ids(store.find(owner="alice", text="%"))
        == ids(store.find(owner="alice", text="_"))
        == [odd]
    )
    assert store.count(owner="alice") == 3
    assert store.count(owner="alice", text="alpha") == 2
    assert store.count(owner="alice", text="alpha", states=[JobState.COMPLETED]) == 1
    assert store.count(owner="bob") == 1 and store.count(owner="carol") == 0
    assert bobs not in ids(store.find(owner="alice", text="alpha"))


def test_unsettled_holds_the_jobs_not_final(database_url: str) -> None:
    store = clocked_store(database_url)
    new, queued, done, failed = (make(store) for _ in range(4))
    store.set_native_id(queued, "17", "queued")
    store.transition(done, JobState.COMPLETED, "done", exit_code=0)
    store.transition(failed, JobState.FAILED, "failed", exit_code=1)
    assert {record.id for record in store.unsettled()} == {new, queued}
    assert {record.id for record in JobStore(database_url).unsettled()} == {new, queued}


def test_transition_many_applies_a_cycle_in_one_go_and_skips_unknown_ids(database_url: str) -> None:
    store = clocked_store(database_url)
    first, second = make(store), make(store)
    store.transition_many(
        [
            StateChange(first, JobState.ACTIVE, "RUNNING"),
            StateChange(second, JobState.COMPLETED, "COMPLETED, exit code 0", exit_code=0),
            StateChange("no-such-job", JobState.ACTIVE, "RUNNING"),
        ]
    )
    store.transition_many([StateChange(first, JobState.ACTIVE, "RUNNING")])  # no change
    store.transition_many([])
    for reader in (store, JobStore(database_url)):  # the cache and the database agree
        one, two = reader.get(first), reader.get(second)
        assert one is not None and two is not None
        assert one.state == JobState.ACTIVE
        assert [entry["state"] for entry in one.history] == ["new", "active"]
        assert two.state == JobState.COMPLETED and two.exit_code == 0
    assert store.get("no-such-job") is None


def test_a_transition_of_an_unknown_job_is_a_key_error(database_url: str) -> None:
    store = JobStore(database_url)
    with pytest.raises(KeyError):
        store.transition("no-such-job", JobState.ACTIVE, "RUNNING")
    with pytest.raises(KeyError):
        store.request_cancel("no-such-job")


def test_withdraw_frees_the_idempotency_key(database_url: str) -> None:
    store = JobStore(database_url)
    first = make(store, key="k1")
    withdrawn = store.withdraw(first, "scheduler down, try again")
    assert withdrawn.state == JobState.FAILED and withdrawn.idempotency_key is None
    second = make(store, key="k1")
    found = store.by_idempotency_key("alice", "k1")
    assert found is not None and found.id == second != first


def test_jobs_without_a_key_never_collide(database_url: str) -> None:
    store = JobStore(database_url)
    assert len({make(store) for _ in range(3)}) == 3
    make(store, key="k")
    make(store, owner="bob", key="k")  # the key is per owner
