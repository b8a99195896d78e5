"""Several gateway processes (replicas) on one store: who is alive, and who does what.

Why: behind a load balancer any replica takes any request, so work that must happen once —
sending a job to the scheduler, polling a resource's job states — is claimed in the shared
database instead of being assumed by the process that happens to know of it.

- Every replica has a row in `replicas` and writes its heartbeat there every
  `timeout / 5` seconds from a thread of its own (never blocked by a scheduler command).
  A replica is alive while its heartbeat is younger than `timeout`, and has not said it
  stopped; on this host (the same boot and pid namespace: containers sharing a host name
  do not share pids), a replica whose process is gone is dead at once (a restart after
  `kill -9` need not wait for its heartbeat to age).
- A job being sent is claimed by its replica (`jobs.claimed_by`, see `JobStore.claim`); the
  others' reconcile leaves it alone while that replica lives, and takes it over when it
  dies (then the settle time still guards against the dead replica's last `sbatch`).
- Work done for all, such as a resource's status polling, is a lease in `leases`, held while
  its holder lives: one heartbeat renews them all, and another replica takes a lease over
  when the holder's heartbeat stops. Two replicas polling at once for a moment is harmless
  (the same state written twice); leases only keep the scheduler from being asked twice.
- Leases taken with `share` are spread: each has one preferred replica among the live ones
  (`preferred`: highest random weight of the lease's name and the replica's id, so every
  replica reaches the same answer alone, and a replica that comes or goes moves only its
  own share), which takes it when it is free; a holder that is not the preferred one hands
  it over (deletes its row) at its next check, and the preferred one takes it at its own.
  With k replicas each holds about 1/k of the leases, never two at once, and a lease is
  without holder for at most one check (a dead holder's: its heartbeat time-out, as with
  `hold`). A free lease whose preferred replica does not take it within the heartbeat
  time-out (a process with no poller, which registers but does not check leases) is taken
  by any replica, and kept while the same replica stays preferred.

A SQLite store is for one process: a second live gateway process on the same file is
refused (`SharedSqliteError`), as its read cache would serve the other's stale states.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import delete, or_, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import sessionmaker

from iri_gateway.service.operations import events
from iri_gateway.service.operations.database import DatabaseError, display_url, is_sqlite
from iri_gateway.service.operations.events import event
from iri_gateway.service.operations.schema import LeaseRow, ReplicaRow
from iri_gateway.service.operations.store import JobStore

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 15.0
"""Seconds without a heartbeat after which a replica is taken for dead."""

FORGET_AFTER = 7 * 24 * 3600.0
"""Rows of replicas stopped or silent for this long are removed at the next start."""


def pid_space() -> str | None:
    """The kernel's boot id and this process's pid namespace (Linux), where a pid names one
    process; None where they cannot be read."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    return f"{boot} {namespace}"


def preferred(name: str, replica_ids: Iterable[str]) -> str | None:
    """The replica that should hold the lease `name` among `replica_ids` (None: none given):
    the highest random weight (rendezvous hashing) of (replica id, name). The same for
    every replica that sees the same live ones, and stable when a replica comes or goes:
    only the leases that one preferred, or now prefers, move."""

    def weight(replica_id: str) -> bytes:
        return hashlib.sha256(f"{replica_id}\0{name}".encode()).digest()

    return max(replica_ids, key=weight, default=None)


class SharedSqliteError(DatabaseError):
    """A second gateway process on one SQLite store."""

    code = "database_in_use"


@dataclass(frozen=True)
class ReplicaInfo:
    """One row of `replicas`, as another replica sees it."""

    id: str
    host: str
    pid: int
    pid_space: str | None
    heartbeat_at: float
    stopped_at: float | None


class Replica:
    """This process among the replicas sharing `store`: registered when made."""

    def __init__(
        self,
        store: JobStore,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        clock: Callable[[], float] = time.time,
        host: str | None = None,
        pid: int | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"replica timeout must be positive, not {timeout}")
        self.id = str(uuid.uuid4())
        self.timeout = timeout
        self.host = host or socket.gethostname()
        self.pid = os.getpid() if pid is None else pid
        self.pid_space = pid_space()
        self._store = store
        self._sessions = sessionmaker(store.engine, expire_on_commit=False)
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._free_since: dict[str, float] = {}
        """`share`: when this replica first saw a lease free that another replica prefers."""
        self._adopted: dict[str, str | None] = {}
        """`share`: leases taken for a preferred replica that did not take them, with it."""
        self.last_beat: float | None = None
        """When this replica's heartbeat last reached the database (None: not yet)."""
        self.beat_error: str | None = None
        """Why the last heartbeat failed, if it did."""
        self._register()

    # ---- life --------------------------------------------------------------------------

    def _register(self) -> None:
        now = self._clock()
        if is_sqlite(self._store.engine.url):
            others = [r for r in self.others() if r.pid != self.pid or r.host != self.host]
            if others:
                other = others[0]
                raise SharedSqliteError(
                    f"the SQLite store {display_url(self._store.engine.url)} is in use by "
                    f"another gateway process (pid {other.pid} on {other.host}, heartbeat "
                    f"{now - other.heartbeat_at:.0f} s ago); a SQLite store serves one "
                    "process: stop that one, or give every replica the same PostgreSQL "
                    "store (--database-url)"
                )
        with self._store.writing() as session:
            session.execute(
                delete(ReplicaRow).where(
                    or_(
                        ReplicaRow.stopped_at < now - FORGET_AFTER,
                        ReplicaRow.heartbeat_at < now - FORGET_AFTER,
                    )
                )
            )
            session.add(
                ReplicaRow(
                    id=self.id,
                    host=self.host,
                    pid=self.pid,
                    pid_space=self.pid_space,
                    started_at=now,
                    heartbeat_at=now,
                    stopped_at=None,
                )
            )
        self.last_beat = now

    def start(self) -> None:
        """Beat from a thread of its own until `stop`."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="replica-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        interval = self.timeout / 5
        while not self._stop.wait(interval):
            self.beat()

    def beat(self) -> bool:
        """Write the heartbeat now; False (the reason kept in `beat_error`) when the
        database did not take it."""
        now = self._clock()
        try:
            with self._store.writing() as session:
                session.execute(
                    update(ReplicaRow)
                    .where(ReplicaRow.id == self.id)
                    .values(heartbeat_at=now, stopped_at=None)
                )
        except SQLAlchemyError as error:
            self.beat_error = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
            log.warning("replica heartbeat not written: %s", self.beat_error)
            return False
        self.last_beat, self.beat_error = now, None
        return True

    def stop(self) -> None:
        """Stop beating, give up every lease and claim, and say so: the others take over at
        once instead of waiting for the heartbeat to age."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        try:
            released = self._store.release_all(self.id)
            with self._store.writing() as session:
                session.execute(delete(LeaseRow).where(LeaseRow.holder == self.id))
                session.execute(
                    update(ReplicaRow)
                    .where(ReplicaRow.id == self.id)
                    .values(stopped_at=self._clock())
                )
        except SQLAlchemyError as error:
            log.warning(
                "replica %s could not say it stopped (the others take over once its "
                "heartbeat is %g s old): %s",
                self.id,
                self.timeout,
                error,
            )
            return
        if released:
            log.info(
                "replica %s stopped; %d jobs it was sending are left to the others' reconcile",
                self.id,
                released,
            )

    # ---- who is alive ------------------------------------------------------------------

    def others(self) -> list[ReplicaInfo]:
        """The other replicas alive now (see the module's docstring)."""
        fresh = self._clock() - self.timeout
        with self._sessions() as session:
            rows = session.scalars(
                select(ReplicaRow).where(
                    ReplicaRow.id != self.id,
                    ReplicaRow.stopped_at.is_(None),
                    ReplicaRow.heartbeat_at >= fresh,
                )
            ).all()
            infos = [
                ReplicaInfo(r.id, r.host, r.pid, r.pid_space, r.heartbeat_at, r.stopped_at)
                for r in rows
            ]
        return [info for info in infos if not self._gone_from_this_host(info)]

    def live(self) -> list[str]:
        """The ids of the replicas alive now, this one included."""
        return [self.id, *(info.id for info in self.others())]

    def _gone_from_this_host(self, info: ReplicaInfo) -> bool:
        """True when `info`'s process ran where this one runs (same boot of the same
        kernel, same pid namespace) and is gone; unknown places are never judged."""
        if self.pid_space is None or info.pid_space != self.pid_space or info.pid == self.pid:
            return False
        try:
            os.kill(info.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, another account's
            return False
        return False

    # ---- leases ------------------------------------------------------------------------

    def hold(self, names: Iterable[str]) -> set[str]:
        """Take or keep the leases `names` where their holder is dead or there is none;
        the names this replica holds afterwards. Two replicas taking one lease at once:
        one conditional write each, one wins."""
        wanted, live, now, holders = self._look(names)
        if not wanted:
            return set()
        held = {name for name, holder in holders.items() if holder == self.id}
        for name in wanted:
            if name in held or holders.get(name) in live:
                continue
            if self._take(name, holders.get(name), live, now):
                held.add(name)
        return held

    def share(self, names: Iterable[str]) -> set[str]:
        """Take, keep or hand over the leases `names` so that the live replicas share them
        (see the module's docstring): this replica takes a lease that is free and prefers it,
        whose holder is dead, or that stayed free for a heartbeat time-out; it hands over a
        lease it holds that another live replica now prefers. The names this replica holds
        afterwards. Taking is `hold`'s conditional write: one replica wins. A lease whose
        holder died goes to the preferred live replica at once, to any other after a
        heartbeat time-out more."""
        wanted, live, now, holders = self._look(names)
        if not wanted:
            return set()
        held: set[str] = set()
        hand_over: list[str] = []
        for name in wanted:
            holder, best = holders.get(name), preferred(name, live)
            if holder == self.id or holder in live:
                self._free_since.pop(name, None)
            if holder == self.id:
                if best == self.id or self._adopted.get(name, self.id) == best:
                    held.add(name)
                else:
                    hand_over.append(name)
                continue
            self._adopted.pop(name, None)
            if holder in live:
                continue  # its holder hands it over when it should
            # Free, or its holder is dead: the preferred replica takes it at its next check;
            # another only once it stayed so for a heartbeat time-out.
            waited = now - self._free_since.setdefault(name, now)
            if best != self.id and waited < self.timeout:
                continue
            if self._take(name, holder, live, now):
                held.add(name)
                self._free_since.pop(name, None)
                if best != self.id:
                    self._adopted[name] = best
        if hand_over:
            self._hand_over(hand_over)
        return held

    def _hand_over(self, names: list[str]) -> None:
        """Give up leases another live replica prefers (it takes them at its next check)."""
        with self._store.writing() as session:
            session.execute(
                delete(LeaseRow).where(LeaseRow.name.in_(names), LeaseRow.holder == self.id)
            )
        for name in names:
            self._adopted.pop(name, None)
        event(
            log,
            events.LEASE_HANDED,
            f"replica {self.id} handed over leases {', '.join(names)}",
            replica=self.id,
            leases=names,
        )

    def _look(self, names: Iterable[str]) -> tuple[list[str], list[str], float, dict[str, str]]:
        """What a lease check starts from: the names (once each), the live replicas, the
        time, and the holder of each lease of `names` that has one (none read when no name
        is given)."""
        wanted = list(dict.fromkeys(names))
        if not wanted:
            return [], [], 0.0, {}
        live, now = self.live(), self._clock()
        with self._sessions() as session:
            holders = dict(
                session.execute(
                    select(LeaseRow.name, LeaseRow.holder).where(LeaseRow.name.in_(wanted))
                ).all()
            )
        return wanted, live, now, holders

    def _take(self, name: str, holder: str | None, live: list[str], now: float) -> bool:
        try:
            with self._store.writing() as session:
                if holder is None:
                    session.add(LeaseRow(name=name, holder=self.id, taken_at=now))
                    return True
                result = session.execute(
                    update(LeaseRow)
                    .where(LeaseRow.name == name, LeaseRow.holder.not_in(live))
                    .values(holder=self.id, taken_at=now)
                    .execution_options(synchronize_session=False)
                )
                taken = bool(getattr(result, "rowcount", 0))
        except IntegrityError:  # another replica inserted it first
            return False
        if taken:
            event(
                log,
                events.LEASE_TAKEN,
                f"replica {self.id} took over lease {name} from {holder or 'nobody'}",
                replica=self.id,
                lease=name,
                holder=holder,
            )
        return taken

    def leases(self) -> list[str]:
        """The leases this replica holds, by the database."""
        with self._sessions() as session:
            return sorted(
                session.scalars(select(LeaseRow.name).where(LeaseRow.holder == self.id)).all()
            )
