"""Per-user request rate limits, shared by every replica through the store.

Two budgets per user: `read` (requests that change nothing: cheap, mostly answered from the
store; which requests those are is the API's to say, `api.rate_limit.is_read`) and `write`
(the rest: launches, cancels, filesystem writes, uploads, which cost scheduler commands, disk
and workers), each a rate in requests per second averaged over a sliding window of
`window` seconds (a user may burst up to rate x window, then keeps to the rate). A request
past its budget is refused with `RateLimitError`: which limit, its value, the user's use,
and the seconds until one more request fits.

The hot path is one lock and a few dictionary reads: no database write per request. On
SQLite (one process) the counts are read once at start and written once at stop, nothing in
between. Each replica counts its own requests per user, kind and window in memory; every
`sync_interval` seconds a thread writes this replica's counts of the current and the
previous window to `rate_counts` (its own rows, replaced) and reads the sums of the other
replicas' rows. A
request is admitted when this replica's count plus the others' (as last read) stays within
the limit. So two replicas can together let through more than the limit only by what the
user sent to the other replica since its last sync (at most `sync_interval` plus a database
round trip of the user's requests there), and never more than the limit each: with N
replicas at worst N x the limit when the database cannot be reached at all (each replica
then still holds its own count, and says so in its log).

The sliding window is estimated from two fixed windows (the current one, and the previous
one weighted by the part of it still inside the sliding window), as counters are cheap to
share and a log of every request is not. Window numbers come from the wall clock, which the
replicas are assumed to share (NTP), as their heartbeats already do.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import sessionmaker

from iri_gateway.errors import GatewayError
from iri_gateway.service.operations.database import is_sqlite
from iri_gateway.service.operations.schema import RateCountRow
from iri_gateway.service.operations.store import JobStore

log = logging.getLogger(__name__)

READ, WRITE = "read", "write"
KINDS = (READ, WRITE)
SETTING = {READ: "read_rate", WRITE: "write_rate"}
"""The setting that gives each kind's rate (named in the refusal)."""
EPSILON = 1e-9
"""Slack for the floating-point arithmetic of window fractions (1011 s is 0.1 into its
window, not 0.09999999)."""


OWNER_CHARS = 255
"""The width of `rate_counts.owner`."""


def counted_as(user: str) -> str:
    """The name `user`'s requests are counted under: the name itself, or a digest of a name
    too long for the table (an identity provider's `sub` is not bounded), so that one long
    name cannot make the shared write fail for every user."""
    if len(user) <= OWNER_CHARS // 2:
        return user
    return "sha256:" + hashlib.sha256(user.encode("utf-8", "surrogatepass")).hexdigest()


class RateLimitError(GatewayError):
    """A user's request past one of their rate limits (429, with `retry_after` seconds)."""

    code = "rate_limited"

    def __init__(
        self, *, user: str, kind: str, rate: float, window: float, used: float, retry_after: int
    ) -> None:
        self.user, self.kind, self.rate, self.window = user, kind, rate, window
        self.used, self.retry_after = used, retry_after
        self.limit = SETTING[kind]
        budget = rate * window
        super().__init__(
            f"{user} made {used:.0f} {kind} requests in the last {window:g} s, the most "
            f"allowed ({self.limit}: {rate:g} per second, {budget:.0f} per {window:g} s, "
            f"shared by every gateway process): try again in {retry_after} s"
        )


@dataclass(frozen=True)
class Usage:
    """One user's use of one kind's budget now."""

    kind: str
    limit: str
    rate: float
    window: float
    used: float


class RateLimiter:
    """Counts each user's requests and refuses those past their rate (see the module)."""

    def __init__(
        self,
        store: JobStore,
        replica_id: str,
        *,
        read_rate: float,
        write_rate: float,
        window: float,
        sync_interval: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.replica_id = replica_id
        self.rates = {READ: read_rate, WRITE: write_rate}
        self.window, self.sync_interval = window, sync_interval
        self._clock = clock
        self._sessions = sessionmaker(store.engine, expire_on_commit=False)
        self._writing = store.writing
        self._lock = threading.Lock()
        self._mine: dict[tuple[str, str, int], int] = {}
        self._others: dict[tuple[str, str, int], int] = {}
        self._dirty = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # A SQLite store has one gateway process (`replicas.Replica` refuses a second): no
        # other replica's counts to read, so no periodic sync (a write every `sync_interval`
        # that took the store's write turn from the launches).
        self._shared = not is_sqlite(store.engine.url)

    # ---- the hot path ----------------------------------------------------------------------

    def charge(self, user: str, kind: str) -> None:
        """Count one request of `user`'s, or refuse it (RateLimitError; not counted)."""
        now = self._clock()
        slot = int(now // self.window)
        budget = self.rates[kind] * self.window
        with self._lock:
            current, previous = self._counts(counted_as(user), kind, slot)
            used = previous * (1.0 - self._fraction(now, slot)) + current
            if used + 1 > budget + EPSILON:
                raise RateLimitError(
                    user=user,
                    kind=kind,
                    rate=self.rates[kind],
                    window=self.window,
                    used=used,
                    retry_after=self._retry_after(now, slot, current, previous, budget),
                )
            key = (counted_as(user), kind, slot)
            self._mine[key] = self._mine.get(key, 0) + 1
            self._dirty = True

    def _fraction(self, now: float, slot: int) -> float:
        """How far into window `slot` `now` is (0 to 1)."""
        return (now - slot * self.window) / self.window

    def _counts(self, user: str, kind: str, slot: int) -> tuple[int, int]:
        """(this window's, the previous window's) requests over every replica."""
        now_key, before_key = (user, kind, slot), (user, kind, slot - 1)
        return (
            self._mine.get(now_key, 0) + self._others.get(now_key, 0),
            self._mine.get(before_key, 0) + self._others.get(before_key, 0),
        )

    def _retry_after(
        self, now: float, slot: int, current: int, previous: int, budget: float
    ) -> int:
        """Whole seconds until one more request fits, if no other comes meanwhile."""
        room = budget - 1
        start = slot * self.window
        if current <= room and previous > 0:  # the previous window's part slides out
            ready = start + self.window * (1 - (room - current) / previous)
        else:  # only when this window becomes the previous one, and slides out enough
            ready = start + self.window * (2 - room / current if current else 1)
        return max(1, math.ceil(ready - now - EPSILON))

    def usage(self, user: str) -> list[Usage]:
        """`user`'s use of each budget now (as this replica knows it)."""
        now = self._clock()
        slot = int(now // self.window)
        fraction = self._fraction(now, slot)
        with self._lock:
            counts = {kind: self._counts(counted_as(user), kind, slot) for kind in KINDS}
        return [
            Usage(
                kind,
                SETTING[kind],
                self.rates[kind],
                self.window,
                counts[kind][1] * (1.0 - fraction) + counts[kind][0],
            )
            for kind in KINDS
        ]

    # ---- sharing through the store -------------------------------------------------------

    def sync(self) -> None:
        """Write this replica's counts of the current and previous windows (its own rows,
        replaced; rows of older windows of every replica dropped), then read the others'."""
        slot = int(self._clock() // self.window)
        with self._lock:
            self._mine = {key: n for key, n in self._mine.items() if key[2] >= slot - 1}
            mine = dict(self._mine)
            dirty, self._dirty = self._dirty, False
        try:
            if dirty:
                with self._writing() as session:
                    session.execute(
                        delete(RateCountRow).where(
                            (RateCountRow.replica_id == self.replica_id)
                            | (RateCountRow.slot < slot - 1)
                        )
                    )
                    session.add_all(
                        RateCountRow(
                            replica_id=self.replica_id, owner=user, kind=kind, slot=at, count=count
                        )
                        for (user, kind, at), count in mine.items()
                    )
            with self._sessions() as session:
                rows = session.execute(
                    select(
                        RateCountRow.owner,
                        RateCountRow.kind,
                        RateCountRow.slot,
                        func.sum(RateCountRow.count),
                    )
                    .where(
                        RateCountRow.replica_id != self.replica_id, RateCountRow.slot >= slot - 1
                    )
                    .group_by(RateCountRow.owner, RateCountRow.kind, RateCountRow.slot)
                ).all()
        except SQLAlchemyError as error:
            with self._lock:
                self._dirty = self._dirty or dirty
            log.warning(
                "request counts not shared with the other replicas (each counts "
                "its own until the database answers): %s",
                error,
            )
            return
        with self._lock:
            self._others = {
                (user, kind, int(at)): int(count or 0) for user, kind, at, count in rows
            }

    def start(self) -> None:
        """Sync every `sync_interval` seconds in a thread of its own, until `stop`; on
        SQLite, read once what an earlier process wrote at its `stop` and sync no more."""
        self._stop.clear()
        if not self._shared:
            self.sync()
            return
        self._thread = threading.Thread(target=self._run, name="rate-sync", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.sync_interval):
            try:
                self.sync()
            except Exception:  # a bug: logged, and the next sync tries again
                log.exception("request counts not synced")

    def stop(self) -> None:
        """End the sync thread (after one last write of this replica's counts)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        try:
            self.sync()
        except Exception as error:
            log.warning("last request counts not written: %s", error)
