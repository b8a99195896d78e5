"""Draining: what a serving process knows once SIGTERM or SIGINT told it to stop.

uvicorn owns the signals: on SIGTERM it closes its listening socket, waits for the requests
under way (at most `timeout_graceful_shutdown`, the `drain_timeout` setting; see
`cli.serving`), then runs the application's shutdown. The application learns of the signal
only at that shutdown, too late for `/ready` to tell a load balancer, and without the time
the drain began (the scheduler commands and tasks under way share its one budget). So while
it serves, the application puts its own handler in front of uvicorn's (`watch`): it notes
the time, then hands the signal on unchanged. `Drain` is that note: `draining` for `/ready`,
`deadline` for the engine's stop.

A request still running at the drain's end is cancelled by uvicorn, which then answers a
bare 500 "Internal Server Error" to a request it has not answered yet: `CutByDrain` answers
it instead with a 503 problem and `Retry-After`, which every client (the SDK among them)
sends again, to another replica or the restarted one; what the request had recorded (a job
with its Idempotency-Key) is found again by the repeat.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from iri_gateway.api.plumbing.problems import problem

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


RETRY_AFTER = "1"
"""Seconds a client cut by a drain waits before asking again: another replica or the
restarted one is ready by then, or refuses the connection and is retried later."""


CUT_BY_DRAIN = "iri_gateway.cut_by_drain"
"""The scope key set on a call the drain's end cut, before its 503 goes out."""


class CutByDrain:
    """A request cancelled by the drain's end, unanswered: answered 503, ask again."""

    def __init__(self, app: ASGIApp, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def noting(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, noting)
        except asyncio.CancelledError:
            if started or not self.drain.draining:
                raise
            scope[CUT_BY_DRAIN] = True  # the audit trail records it without a thread
            detail = (
                f"the gateway process stopped before it answered (its drain_timeout of "
                f"{self.drain.timeout:g} s ran out): what this request recorded is kept; ask "
                "again (a launch with the same Idempotency-Key gets the same job)"
            )
            answer = problem(
                Request(scope),
                503,
                "Service Unavailable",
                detail,
                headers={"Retry-After": RETRY_AFTER},
            )
            await answer(scope, receive, send)
