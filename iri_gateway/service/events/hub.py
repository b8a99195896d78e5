"""One reader of the event log per process, for all of its streams.

A thousand streams each reading the log at every change would be a thousand queries per
change; instead the hub reads what is new once (woken by `signal`, or every `poll` seconds
should a wake-up be lost) and keeps the newest `window` events in memory, from where every
stream takes what it has not sent yet. A stream further behind than the window (one
resuming from an old `Last-Event-ID`) reads the log itself until it has caught up.
Memory is bounded by the window, whatever the number of streams.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from sqlalchemy.exc import SQLAlchemyError

from iri_gateway.service.events.log import EventLog, StoredEvent
from iri_gateway.service.events.signal import EventSignal, PostgresListener

log = logging.getLogger(__name__)

READ_BATCH = 500
"""Events read from the log per query."""

SWEEP_EVERY = 600.0
"""Seconds between two retention sweeps of the log (each replica's hub sweeps)."""


class EventHub:
    """The newest events of the log, read by one thread, and the streams told of them."""

    def __init__(
        self,
        events: EventLog,
        signal: EventSignal,
        *,
        window: int = 4096,
        poll: float = 2.0,
        retention: float = 72 * 3600.0,
        listener: PostgresListener | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`retention`: seconds an event is kept (swept every `SWEEP_EVERY` s by the hub's
        thread); `listener`: wakes `signal` when another replica wrote events (PostgreSQL),
        started and stopped with the hub."""
        self._events = events
        self._signal = signal
        self._poll = poll
        self._retention = retention
        self._listener = listener
        self._clock = clock
        self._swept = 0.0
        self._window: deque[StoredEvent] = deque()
        self._capacity = window
        self._floor = 0
        """Every event with an id above this one and up to `cursor` is in the window."""
        self._cursor = 0
        self._lock = threading.Lock()
        self._listeners: dict[int, Callable[[], None]] = {}
        self._next_listener = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def cursor(self) -> int:
        """The newest id the hub has read (every older event is committed and was read)."""
        return self._cursor

    def start(self) -> None:
        """Start reading from the log's newest event on (a stream resuming from before it
        reads the log itself)."""
        if self._thread is not None:
            return
        self._stop.clear()
        latest = self._events.latest()
        with self._lock:
            self._floor = self._cursor = latest
            self._window.clear()
        self._thread = threading.Thread(target=self._run, name="event-hub", daemon=True)
        self._thread.start()
        if self._listener is not None:
            self._listener.start()

    @property
    def started(self) -> bool:
        return self._thread is not None

    def stop(self) -> None:
        self._stop.set()
        self._signal.wake()
        if self._listener is not None:
            self._listener.stop()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5)

    def listen(self, wake: Callable[[], None]) -> Callable[[], None]:
        """Call `wake` (from the hub's thread: it must be quick, e.g. a
        `loop.call_soon_threadsafe`) whenever new events are in the window; the returned
        callable stops it."""
        with self._lock:
            key = self._next_listener
            self._next_listener += 1
            self._listeners[key] = wake

        def unlisten() -> None:
            with self._lock:
                self._listeners.pop(key, None)

        return unlisten

    def since(self, event_id: int) -> tuple[list[StoredEvent], int] | None:
        """The events after `event_id` in the window, and the id up to which they are all
        there (the caller's next `event_id`); None when `event_id` is older than the
        window: the caller reads the log."""
        with self._lock:
            if event_id < self._floor:
                return None
            newer: list[StoredEvent] = []
            for event in reversed(self._window):
                if event.id <= event_id:
                    break
                newer.append(event)
            newer.reverse()
            return newer, max(event_id, self._cursor)

    def _run(self) -> None:
        seen = self._signal.count
        while not self._stop.is_set():
            try:
                self._read()
                self._sweep()
            except SQLAlchemyError as error:
                log.warning("the event hub could not read the event log: %s", error)
            seen = self._signal.wait_beyond(seen, self._poll)

    def _read(self) -> None:
        while not self._stop.is_set():
            found = self._events.after(self._cursor, limit=READ_BATCH)
            if not found:
                return
            with self._lock:
                for event in found:
                    self._window.append(event)
                while len(self._window) > self._capacity:
                    self._floor = self._window.popleft().id
                self._cursor = found[-1].id
                listeners = list(self._listeners.values())
            for wake in listeners:
                wake()
            if len(found) < READ_BATCH:
                return

    def _sweep(self) -> None:
        now = self._clock()
        if now - self._swept < SWEEP_EVERY:
            return
        self._swept = now
        swept = self._events.sweep(now - self._retention)
        if swept:
            log.info(
                "event log retention: %d event(s) older than %.0f s deleted", swept, self._retention
            )
