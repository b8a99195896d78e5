"""The rate limiter's arithmetic with a clock of the test's own: the budget is rate x
window, a refusal's `retry_after` is exactly when one more request fits (the previous
window sliding out), a refused request is not counted, and users and kinds are apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from iri_gateway.service.rate_limits import READ, WRITE, RateLimiter, RateLimitError
from iri_gateway.service.store import JobStore


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_budget_the_pause_and_the_slide(tmp_path: Path) -> None:
    clock = Clock(1000.0)  # the start of window 100 (10 s windows)
    limiter = RateLimiter(
        JobStore(f"sqlite:///{tmp_path}/jobs.db"),
        "r1",
        read_rate=1,
        write_rate=2,
        window=10,
        sync_interval=1,
        clock=clock,
    )
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
