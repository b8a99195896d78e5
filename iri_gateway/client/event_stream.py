"""Reading the job event stream with httpx.Client: one stream, reconnected until it is closed.

`EventStream` opens `GET /api/v2/compute/events` with the caller's filters and hands out
`JobEvent`s. When the connection drops (the server restarted, a proxy cut it, nothing came
for `IDLE_LIMIT` seconds, a draining server ended it) it connects again after the server's
`retry` pause (doubled for each failed attempt in a row, at most a minute) with
`Last-Event-ID`, so the server replays what was missed: nothing lost, and an event id seen
once is never handed out twice. `gap` events (the server no longer keeps what was missed)
are handed out too: the caller re-reads its jobs.

`wait_for_job` is `GatewayClient.wait` on the stream: the stream is open (its first bytes
read, so its start is fixed) before the job is read once, so a change made at any moment is
either in that read or on the stream. The async twin is `client.async_event_stream`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING

import httpx

from iri_gateway.client.calls import RETRY_STATUSES, retry_pause
from iri_gateway.client.errors import ConnectionFailed
from iri_gateway.client.events import (
    EVENTS_PATH,
    IDLE_LIMIT,
    RECONNECT_LIMIT,
    JobEvent,
    StreamBroken,
    check_opened,
    job_event_update,
    parse_event,
    reconnect_pause,
    stream_headers,
)
from iri_gateway.client.models import JobInfo, WaitTimeout
from iri_gateway.client.sse import SSEDecoder, StreamTooLarge

if TYPE_CHECKING:
    from iri_gateway.client.sync_client import GatewayClient

log = logging.getLogger("iri_gateway.client.events")
ERROR_BODY_LIMIT = 64 * 1024
"""The most of an error answer's body read (its problem+json)."""


class EventStream:
    """The caller's job events, from one stream kept open (see the module docstring)."""

    def __init__(
        self,
        http: httpx.Client,
        params: httpx.QueryParams,
        *,
        last_event_id: int | None = None,
        sleep: Callable[[float], None],
        clock: Callable[[], float],
        idle_limit: float = IDLE_LIMIT,
        reconnect_limit: int = RECONNECT_LIMIT,
    ) -> None:
        self._http = http
        self._params = params
        self.last_event_id = last_event_id
        """The id of the newest event handed out (or resumed from): where a reconnection
        resumes."""
        self._sleep = sleep
        self._clock = clock
        self._idle_limit = idle_limit
        self._reconnect_limit = reconnect_limit
        self._retry_ms: int | None = None
        self._response: httpx.Response | None = None
        self._chunks: Iterator[str] | None = None
        self._ready: list[JobEvent] = []
        self._deadline: float | None = None
        self.connections = 0
        """How many times the stream was opened (1 plus the reconnections)."""

    def __enter__(self) -> EventStream:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (a later `events` call opens it again)."""
        if self._response is not None:
            self._response.close()
        self._response = None
        self._chunks = None

    def open(self, deadline: float | None = None) -> None:
        """Connect and read the server's first bytes. Raises StreamUnavailable when the
        server has no stream, the gateway's error when it refuses, ConnectionFailed after
        `reconnect_limit` failed attempts. Iterating the stream then hands out the events
        until `deadline`."""
        self._deadline = deadline
        self._connect(deadline, failures=0)

    def __iter__(self) -> Iterator[JobEvent]:
        return self.events(self._deadline)

    def events(self, deadline: float | None = None) -> Iterator[JobEvent]:
        """The events, live, until `deadline` (a `clock` time) passes; forever without one."""
        failures = 0
        while True:
            if self._chunks is None and not self._connect(deadline, failures):
                return
            while self._ready:
                yield from self._take(self._ready.pop(0))
            assert self._chunks is not None
            try:
                for chunk in self._chunks:
                    failures = 0
                    for event in self._feed(chunk):
                        yield from self._take(event)
                    if self._passed(deadline):
                        return
                log.debug("the event stream ended; reconnecting")
            except httpx.TransportError as error:
                log.debug("the event stream dropped (%s); reconnecting", type(error).__name__)
            self.close()
            if self._passed(deadline):
                return
            self._pause(reconnect_pause(self._retry_ms, 0), deadline)

    # ---- inside -------------------------------------------------------------------------------

    def _take(self, event: JobEvent) -> Iterator[JobEvent]:
        if event.type != "gap":
            if self.last_event_id is not None and event.id <= self.last_event_id:
                return
            self.last_event_id = event.id
        yield event

    def _feed(self, chunk: str) -> list[JobEvent]:
        decoder = self._decoder
        try:
            raw = decoder.feed(chunk)
        except StreamTooLarge as error:
            self.close()
            raise StreamBroken(0, "Event stream too large", str(error)) from None
        if decoder.retry is not None:
            self._retry_ms = decoder.retry
        return [event for sse in raw if (event := parse_event(sse)) is not None]

    def _passed(self, deadline: float | None) -> bool:
        return deadline is not None and self._clock() >= deadline

    def _pause(self, seconds: float, deadline: float | None) -> None:
        if deadline is not None:
            seconds = min(seconds, max(0.0, deadline - self._clock()))
        if seconds > 0:
            self._sleep(seconds)

    def _connect(self, deadline: float | None, failures: int) -> bool:
        """Open the stream (with retries); False when the deadline passed first."""
        while True:
            if self._passed(deadline):
                return False
            read = self._idle_limit
            if deadline is not None:
                read = max(0.05, min(read, deadline - self._clock()))
            timeout = httpx.Timeout(self._http.timeout.connect, read=read)
            request = self._http.build_request(
                "GET",
                EVENTS_PATH,
                params=self._params,
                headers=stream_headers(self.last_event_id),
                timeout=timeout,
            )
            pause: float | None = None
            try:
                response = self._http.send(request, stream=True)
                if response.status_code in RETRY_STATUSES:
                    pause = retry_pause(response, failures)
                    response.close()
                else:
                    self._opened(response)
                    return True
            except httpx.TransportError as error:
                self.close()
                log.debug("no event stream connection (%s)", type(error).__name__)
                pause = reconnect_pause(self._retry_ms, failures)
            failures += 1
            if failures >= self._reconnect_limit:
                raise ConnectionFailed(
                    0,
                    "No answer from the gateway",
                    f"{EVENTS_PATH}: {failures} connection attempts in a row failed",
                )
            self._pause(pause, deadline)

    def _opened(self, response: httpx.Response) -> None:
        if response.status_code >= 400:
            body = bytearray()
            try:
                for part in response.iter_bytes():
                    body += part
                    if len(body) >= ERROR_BODY_LIMIT:
                        break
            finally:
                response.close()
            check_opened(response, bytes(body[:ERROR_BODY_LIMIT]))
        try:
            check_opened(response, b"")
        except Exception:
            response.close()
            raise
        self.connections += 1
        self._response = response
        self._decoder = SSEDecoder(last_event_id=str(self.last_event_id or ""))
        self._chunks = response.iter_text()
        first = next(self._chunks, None)
        if first is None:
            self.close()
            raise httpx.RemoteProtocolError("the event stream ended before its first bytes")
        self._ready.extend(self._feed(first))


def wait_for_job(
    client: GatewayClient,
    stream: EventStream,
    resource: str,
    job_id: str,
    deadline: float | None,
    timeout: float | None,
    show: Callable[[JobInfo], None],
) -> JobInfo:
    """Wait on an open stream filtered to the job; WaitTimeout at `deadline`."""
    job = client.status(resource, job_id)
    show(job)
    if job.final:
        return job
    for event in stream.events(deadline):
        seen = job_event_update(event, job_id)
        if event.type == "gap" or (seen is None and event.job_id == job_id):
            seen = client.status(resource, job_id)
        if seen is None:
            continue
        job = seen
        show(job)
        if job.final:
            return job
    raise WaitTimeout(job, timeout or 0.0)
