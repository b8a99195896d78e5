"""The rate limiter's arithmetic with a clock of the test's own: the budget is rate x
window, a refusal's `retry_after` is exactly when one more request fits (the previous
window sliding out), a refused request is not counted, and users and kinds are apart."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from iri_gateway.service.accounts.rate_limits import READ, WRITE, RateLimiter, RateLimitError
from iri_gateway.service.operations.store import JobStore


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def limiter_at(url: str, clock: Clock, *, read: float, write: float) -> RateLimiter:
    """A limiter of replica r1 with 10 s windows on the store at `url`, on `clock`."""
    return RateLimiter(
        JobStore(url),
        "r1",
        read_rate=read,
        write_rate=write,
        window=10,
        sync_interval=1,
        clock=clock,
    )


def test_the_budget_the_pause_and_the_slide(tmp_path: Path) -> None:
    clock = Clock(1000.0)  # the start of window 100 (10 s windows)
    limiter = limiter_at(f"sqlite:///{tmp_path}/jobs.db", clock, read=1, write=2)
    for _ in range(10):
        limiter.charge("alice", READ)
    with pytest.raises(RateLimitError) as refused:
        limiter.charge("alice", READ)
    # One more fits when 10 x (1 - f) <= 9 in the next window: f = 0.1, at 1011.
    assert refused.value.retry_after == 11 and refused.value.limit == "read_rate"
    assert refused.value.used == 10
    for _ in range(20):  # refusals are not counted
        with pytest.raises(RateLimitError):
            limiter.charge("alice", READ)
    limiter.charge("bob", READ)  # another user
    for _ in range(20):  # another kind
        limiter.charge("alice", WRITE)
    clock.now = 1010.8
    with pytest.raises(RateLimitError) as later:
        limiter.charge("alice", READ)
    assert later.value.retry_after == 1
    clock.now = 1011.0
    limiter.charge("alice", READ)
    with pytest.raises(RateLimitError):
        limiter.charge("alice", READ)
    clock.now = 1030.0  # two windows on: nothing left of the burst
    for _ in range(10):
        limiter.charge("alice", READ)
    usage = {use.kind: use.used for use in limiter.usage("alice")}
    assert usage == {READ: 10, WRITE: 0}


def test_racing_requests_get_exactly_the_budget(tmp_path: Path) -> None:
    """16 threads asking 10 times each at the same moment: 50 admitted, never more."""
    clock = Clock(2000.0)
    limiter = limiter_at(f"sqlite:///{tmp_path}/jobs.db", clock, read=5, write=5)
    start = threading.Barrier(16)
    admitted: list[int] = []

    def ask() -> None:
        start.wait()
        served = 0
        for _ in range(10):
            try:
                limiter.charge("alice", WRITE)
                served += 1
            except RateLimitError:
                pass
        admitted.append(served)

    threads = [threading.Thread(target=ask) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sum(admitted) == 50 and len(admitted) == 16


def test_a_name_too_long_for_the_table_is_shared_by_its_digest(
    database_url: str,
) -> None:
    """A 10,000-character user name (a JWT `sub` is unbounded) is counted and shared like
    any other, and does not keep the other users' counts from being shared (PostgreSQL
    refuses a value wider than the column: the whole write would fail)."""
    store = JobStore(database_url)
    clock = Clock(3000.0)
    one, other = (
        RateLimiter(
            store, replica, read_rate=0.2, write_rate=1, window=10, sync_interval=1, clock=clock
        )
        for replica in ("r1", "r2")
    )
    long_name = "x" * 10_000
    for user in (long_name, "bob"):
        for _ in range(2):
            one.charge(user, READ)
    one.sync()
    other.sync()
    for user in (long_name, "bob"):
        with pytest.raises(RateLimitError):
            other.charge(user, READ)


def _shared_rows(store: JobStore) -> int:
    from sqlalchemy import func, select

    from iri_gateway.service.operations.schema import RateCountRow

    with store.engine.connect() as connection:
        return int(connection.scalar(select(func.count()).select_from(RateCountRow)) or 0)


def test_on_sqlite_counts_are_not_written_while_serving(tmp_path: Path) -> None:
    """A SQLite store has one gateway process: nothing to share, so no write of the counts
    every `sync_interval` (it took the store's write turn from launches); they are written
    at stop, and the next process on the store reads them at start."""
    url = f"sqlite:///{tmp_path}/jobs.db"
    store = JobStore(url)
    clock = Clock(4000.0)  # still: the counts carried over are exact (a real one decays them)
    limiter = RateLimiter(
        store, "r1", read_rate=5, write_rate=5, window=60, sync_interval=0.01, clock=clock
    )
    limiter.start()
    for _ in range(3):
        limiter.charge("alice", READ)
    stopped = threading.Event()
    stopped.wait(0.3)  # thirty sync intervals: a syncing thread would have written
    assert _shared_rows(store) == 0
    limiter.stop()
    assert _shared_rows(store) == 1
    after = RateLimiter(
        store, "r2", read_rate=5, write_rate=5, window=60, sync_interval=0.01, clock=clock
    )
    after.start()
    used = {u.kind: u.used for u in after.usage("alice")}
    assert used[READ] == pytest.approx(3)
    after.stop()
