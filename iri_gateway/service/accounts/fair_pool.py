"""A pool of worker threads that shares its workers fairly between users.

Why not a `ThreadPoolExecutor`: its queue is first come, first served, so one user who queues
32 long compressions holds every worker until they are done, and another user's 12-byte copy
waits behind all of them. Here each user has a queue of their own; a free worker takes the
oldest task of the user who has the fewest tasks running (ties: the user whose last task
started longest ago, a user who has started none first; so with equal shares the users take
turns), and no user ever has more than `per_user` tasks running at once.

The bound this gives (with `per_user` below `workers`): a user whose first task arrives
while other users' tasks fill the pool waits at most until one running task ends, since they
then have the fewest running and are picked next; while a worker is free (one user alone can
hold only `per_user` of them) it starts at once.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Waiting:
    order: int
    key: str
    run: Callable[[], None]


class PoolClosedError(Exception):
    """The pool is closed: it takes nothing more."""


class FairPool:
    """`workers` threads running the submitted callables, fairly between their owners."""

    def __init__(self, *, workers: int, per_user: int, name: str = "task") -> None:
        if not 1 <= per_user <= workers:
            raise ValueError(f"per_user must be between 1 and workers ({workers}), not {per_user}")
        self.workers, self.per_user = workers, per_user
        self._ready = threading.Condition()
        self._waiting: dict[str, deque[_Waiting]] = {}
        self._running: Counter[str] = Counter()
        self._order = itertools.count()
        self._turns = itertools.count()
        self._last_turn: dict[str, int] = {}
        """Per owner with waiting or running work: when their last task started."""
        self._closed = False
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{index}", daemon=True)
            for index in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, owner: str, key: str, run: Callable[[], None]) -> None:
        """Queue `run` as `owner`'s (`key` names it for `withdraw`)."""
        with self._ready:
            if self._closed:
                raise PoolClosedError("the pool is closed")
            self._waiting.setdefault(owner, deque()).append(_Waiting(next(self._order), key, run))
            self._ready.notify()

    def withdraw(self, key: str) -> bool:
        """Take the waiting callable `key` out of its queue (True); False when it is not
        waiting (running, done, or never queued)."""
        with self._ready:
            for owner, queue in self._waiting.items():
                for item in queue:
                    if item.key == key:
                        queue.remove(item)
                        if not queue:
                            del self._waiting[owner]
                            if not self._running[owner]:
                                self._last_turn.pop(owner, None)
                        return True
        return False

    def counts(self) -> dict[str, tuple[int, int]]:
        """Per owner: (running, waiting), for owners with either."""
        with self._ready:
            owners = set(self._running) | set(self._waiting)
            return {
                owner: (self._running[owner], len(self._waiting.get(owner, ()))) for owner in owners
            }

    def close(self) -> list[str]:
        """Take nothing more; the keys of the callables that were still waiting (they will
        not run). Running ones finish (their threads end after them)."""
        with self._ready:
            self._closed = True
            dropped = [item.key for queue in self._waiting.values() for item in queue]
            self._waiting.clear()
            self._ready.notify_all()
        return dropped

    def _next(self) -> tuple[str, _Waiting] | None:
        """The owner with the fewest running (below `per_user`), ties by whose last task
        started longest ago; called holding the lock."""
        best: tuple[int, int, int, str] | None = None
        for owner, queue in self._waiting.items():
            running = self._running[owner]
            if running >= self.per_user:
                continue
            rank = (running, self._last_turn.get(owner, -1), queue[0].order, owner)
            if best is None or rank < best:
                best = rank
        if best is None:
            return None
        owner = best[3]
        self._last_turn[owner] = next(self._turns)
        queue = self._waiting[owner]
        item = queue.popleft()
        if not queue:
            del self._waiting[owner]
        return owner, item

    def _work(self) -> None:
        while True:
            with self._ready:
                picked = self._next()
                while picked is None:
                    if self._closed:
                        return
                    self._ready.wait()
                    picked = self._next()
                owner, item = picked
                self._running[owner] += 1
            try:
                item.run()
            except Exception:
                log.exception("work %s failed", item.key)
            finally:
                with self._ready:
                    self._running[owner] -= 1
                    if self._running[owner] <= 0:
                        del self._running[owner]
                        if owner not in self._waiting:
                            self._last_turn.pop(owner, None)
                    self._ready.notify_all()
