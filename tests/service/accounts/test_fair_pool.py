"""The fair worker pool: who runs next, the per-user cap, withdrawing a waiting item."""

from __future__ import annotations

import threading

import pytest

from iri_gateway.service.accounts.fair_pool import FairPool, PoolClosedError


def test_the_user_with_fewest_running_goes_next_and_nobody_passes_the_cap() -> None:
    pool = FairPool(workers=2, per_user=1)
    release = threading.Event()
    started: list[str] = []
    lock = threading.Lock()

    def work(name: str) -> None:
        with lock:
            started.append(name)
        release.wait(10)

    for n in range(5):
        pool.submit("alice", f"a{n}", lambda n=n: work(f"a{n}"))
    pool.submit("bob", "b0", lambda: work("b0"))
    for _ in range(200):
        if len(started) == 2:
            break
        threading.Event().wait(0.01)
    # alice's first, then bob's: alice may hold only one worker, even with one free.
    assert started == ["a0", "b0"]
    assert pool.counts() == {"alice": (1, 4), "bob": (1, 0)}
    assert pool.withdraw("a3") and not pool.withdraw("a3") and not pool.withdraw("a0")
    release.set()
    for _ in range(500):
        if pool.counts() == {}:
            break
        threading.Event().wait(0.01)
    dropped = set(pool.close())
    assert dropped == set()
    assert sorted(started) == ["a0", "a1", "a2", "a4", "b0"]
    with pytest.raises(PoolClosedError):
        pool.submit("alice", "late", lambda: None)


def test_a_cap_above_the_workers_is_refused() -> None:
    with pytest.raises(ValueError, match="per_user must be between 1 and workers"):
        FairPool(workers=2, per_user=3)


def test_with_one_worker_the_users_take_turns() -> None:
    """alice's three queued before bob's one: bob's runs second, not fourth."""
    pool = FairPool(workers=1, per_user=1)
    gate = threading.Event()
    order: list[str] = []
    pool.submit("alice", "a0", gate.wait)
    for name in ("a1", "a2"):
        pool.submit("alice", name, lambda name=name: order.append(name))
    pool.submit("bob", "b0", lambda: order.append("b0"))
    gate.set()
    for _ in range(500):
        if len(order) == 3:
            break
        threading.Event().wait(0.01)
    pool.close()
    assert order == ["b0", "a1", "a2"]
