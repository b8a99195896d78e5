"""Per-user limits of the port proxy in this process: open connections, and bytes per second.

One user's notebook must not take the gateway's sockets or its bandwidth from everyone
else's. Connections are counted while they are open (a slot each, given back when it
closes); bytes pass through a token bucket per user, refilled at `bytes_per_second` up to
one second's worth, which a user's connections share: a transfer past the rate waits (the
caller sleeps for what `delay` says) instead of failing. Both are per replica, like the
stream slots of the event stream: a user spread over N replicas may hold N times as much.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from iri_gateway.service.proxy.errors import ProxyLimitError


@dataclass
class _Bucket:
    level: float
    stamp: float


@dataclass
class ProxyLimits:
    """Connection slots and byte buckets of every user of this process."""

    connections_per_user: int
    bytes_per_second: int
    clock: Callable[[], float] = time.monotonic
    _open: dict[str, int] = field(default_factory=dict)
    _buckets: dict[str, _Bucket] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take_connection(self, owner: str) -> None:
        """A slot for one more connection of `owner`; ProxyLimitError when all are taken."""
        with self._lock:
            held = self._open.get(owner, 0)
            if held >= self.connections_per_user:
                raise ProxyLimitError(
                    f"{owner!r} has {held} proxied connections open, as many as this gateway "
                    f"allows one user ({self.connections_per_user}); close some and try again"
                )
            self._open[owner] = held + 1

    def give_back(self, owner: str) -> None:
        with self._lock:
            held = self._open.get(owner, 0) - 1
            if held > 0:
                self._open[owner] = held
            else:
                self._open.pop(owner, None)

    def open_connections(self, owner: str) -> int:
        with self._lock:
            return self._open.get(owner, 0)

    def delay(self, owner: str, size: int) -> float:
        """Seconds to wait before passing `size` more bytes of `owner` on (0: at once). The
        bytes are counted now, so concurrent callers queue behind each other."""
        rate = float(self.bytes_per_second)
        now = self.clock()
        with self._lock:
            bucket = self._buckets.get(owner)
            if bucket is None:
                bucket = self._buckets[owner] = _Bucket(rate, now)
            bucket.level = min(rate, bucket.level + (now - bucket.stamp) * rate)
            bucket.stamp = now
            bucket.level -= size
            if bucket.level >= 0:
                if bucket.level >= rate and self._open.get(owner, 0) == 0:
                    del self._buckets[owner]  # full and idle: forget it
                return 0.0
            return -bucket.level / rate
