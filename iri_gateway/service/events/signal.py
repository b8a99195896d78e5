"""Waking the readers of the event log when something was written: in this process at once
after the commit, and from the other replicas through PostgreSQL's LISTEN/NOTIFY.

A wake-up says only "look again"; what is new is always read from the log, so a lost or
doubled wake-up costs a late or an extra read, never an event. The readers also look on
their own every few seconds (`EventHub`), which bounds the delay should a notification be
lost (a listener reconnecting, say).
"""

from __future__ import annotations

import logging
import threading

import psycopg
from sqlalchemy.engine import URL

from iri_gateway.service.events.log import NOTIFY_CHANNEL

log = logging.getLogger(__name__)


class EventSignal:
    """A counter of wake-ups that threads wait on."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._count = 0

    def wake(self) -> None:
        with self._changed:
            self._count += 1
            self._changed.notify_all()

    @property
    def count(self) -> int:
        return self._count

    def wait_beyond(self, seen: int, timeout: float) -> int:
        """Wait until a wake-up after the `seen`th one, at most `timeout` seconds; the count
        now (the caller's next `seen`)."""
        with self._changed:
            self._changed.wait_for(lambda: self._count > seen, timeout=timeout)
            return self._count


class PostgresListener:
    """LISTENs on the event channel with a connection of its own, in a thread, and wakes
    `signal` at every notification: the events another replica wrote reach this one's
    streams at once. Reconnects after a lost connection (with a growing pause, at most
    `retry_max` seconds), waking the signal when it is back, since notifications sent
    meanwhile are lost."""

    def __init__(self, url: URL, signal: EventSignal, *, retry_max: float = 5.0) -> None:
        self._conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._signal = signal
        self._retry_max = retry_max
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="event-listener", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5)

    def _run(self) -> None:
        pause = 0.2
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True, connect_timeout=10) as conn:
                    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    self._signal.wake()  # what was sent while not listening: look again
                    pause = 0.2
                    while not self._stop.is_set():
                        for _notification in conn.notifies(timeout=1.0, stop_after=1):
                            self._signal.wake()
            except psycopg.Error as error:
                log.warning(
                    "the event listener lost its database connection (%s); again in %.1f s",
                    error,
                    pause,
                )
                self._stop.wait(pause)
                pause = min(pause * 2, self._retry_max)
