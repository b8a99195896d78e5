"""Per-user limits of the port proxy: connection slots and a shared byte rate."""

from __future__ import annotations

import pytest

from iri_gateway.service.proxy.errors import ProxyLimitError
from iri_gateway.service.proxy.limits import ProxyLimits


def test_connections_are_counted_per_user_and_given_back() -> None:
    limits = ProxyLimits(connections_per_user=2, bytes_per_second=1024)
    limits.take_connection("alice")
    limits.take_connection("alice")
    with pytest.raises(ProxyLimitError, match="2 proxied connections open"):
        limits.take_connection("alice")
    limits.take_connection("bob")  # another user is not held back by alice
    limits.give_back("alice")
    limits.take_connection("alice")
    assert limits.open_connections("alice") == 2


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_bytes_past_the_rate_wait_for_their_share() -> None:
    clock = Clock()
    limits = ProxyLimits(connections_per_user=8, bytes_per_second=1000, clock=clock)
    assert limits.delay("alice", 1000) == 0.0  # a second's worth at once
    assert limits.delay("alice", 500) == pytest.approx(0.5)
    assert limits.delay("alice", 500) == pytest.approx(1.0)  # queued behind the first
    assert limits.delay("bob", 1000) == 0.0  # each user has their own bucket
    clock.now = 2.0  # the debt is paid and the bucket refilled to one second's worth
    assert limits.delay("alice", 1000) == 0.0
    assert limits.delay("alice", 1) > 0
