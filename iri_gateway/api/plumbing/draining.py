"""Draining: what a serving process knows once SIGTERM or SIGINT told it to stop.

uvicorn owns the signals: on SIGTERM it closes its listening socket, waits for the requests
under way (at most `timeout_graceful_shutdown`, the `drain_timeout` setting; see
`cli.serving`), then runs the application's shutdown. The application learns of the signal
only at that shutdown, too late for `/ready` to tell a load balancer, and without the time
the drain began (the scheduler commands and tasks under way share its one budget). So while
it serves, the application puts its own handler in front of uvicorn's (`watch`): it notes
the time, then hands the signal on unchanged. `Drain` is that note: `draining` for `/ready`,
`deadline` for the engine's stop.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

log = logging.getLogger("uvicorn.error")

SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""The signals uvicorn stops on."""

Handler = Callable[[int, FrameType | None], Any]


class Drain:
    """Whether this process was told to stop, since when, and until when it may take."""

    def __init__(self, timeout: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = timeout
        """Seconds from the signal to the cut (the `drain_timeout` setting)."""
        self.since: float | None = None
        """When the first stop signal came (`clock` time), None while none came."""
        self._clock = clock
        self._previous: dict[int, Handler] = {}

    @property
    def draining(self) -> bool:
        return self.since is not None

    def begin(self) -> None:
        """The drain starts now (a second signal keeps the first one's time)."""
        if self.since is None:
            self.since = self._clock()
            log.warning(
                "draining: taking no new connections; what is under way gets %g s", self.timeout
            )

    def deadline(self) -> float | None:
        """When what is still under way is cut (`clock` time), None while not draining (a
        shutdown without a signal, as in tests, cuts at once, as it always did)."""
        return None if self.since is None else self.since + self.timeout

    def watch(self) -> None:
        """Note the stop signals before the server's own handlers act on them. Only on the
        main thread (the only one that may set handlers) and only in front of a handler
        written in Python (a server's): a process whose SIGTERM still kills at once (no
        server catches it) keeps that."""
        if threading.current_thread() is not threading.main_thread():
            return
        for number in SIGNALS:
            previous = signal.getsignal(number)
            if not callable(previous):
                continue
            self._previous[number] = previous
            signal.signal(number, self._chained(previous))

    def unwatch(self) -> None:
        """Put the server's handlers back."""
        if threading.current_thread() is not threading.main_thread():
            return
        for number, previous in self._previous.items():
            signal.signal(number, previous)
        self._previous.clear()

    def _chained(self, previous: Handler) -> Handler:
        def handle(number: int, frame: FrameType | None) -> Any:
            self.begin()
            return previous(number, frame)

        return handle
