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

from iri_gateway.client.calls import RETRY_STATUSES
from iri_gateway.client.events import (
    IDLE_LIMIT,
    RECONNECT_LIMIT,
    JobEvent,
    StreamCursor,
    check_opened,
    job_event_update,
)
from iri_gateway.client.models import JobInfo, WaitTimeout

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
        self._sleep = sleep
        self.cursor = StreamCursor(params, last_event_id, clock, idle_limit, reconnect_limit)
        """Where the stream stands: `cursor.last_event_id` is where a reconnection resumes,
        `cursor.connections` how many times it was opened."""
        self._response: httpx.Response | None = None
        self._chunks: Iterator[str] | None = None

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
        self.cursor.deadline = deadline
        self._connect(deadline, failures=0)

    def __iter__(self) -> Iterator[JobEvent]:
        return self.events(self.cursor.deadline)

    def events(self, deadline: float | None = None) -> Iterator[JobEvent]:
        """The events, live, until `deadline` (a `clock` time) passes; forever without one."""
        cursor = self.cursor
        while True:
            if self._chunks is None:
                blind = cursor.connections > 0 and cursor.resume_from is None
                if not self._connect(deadline, 0):
                    return
                if blind:
                    yield cursor.lost_position()
            while cursor.ready:
                event = cursor.ready.pop(0)
                if cursor.new(event):
                    yield event
            assert self._chunks is not None
            try:
                for chunk in self._chunks:
                    for event in self._feed(chunk):
                        if cursor.new(event):
                            yield event
                    if cursor.passed(deadline):
                        return
                log.debug("the event stream ended; reconnecting")
            except httpx.TransportError as error:
                log.debug("the event stream dropped (%s); reconnecting", type(error).__name__)
            self.close()
            if cursor.passed(deadline):
                return
            self._pause(cursor.dropped_pause(0), deadline)

    # ---- inside -------------------------------------------------------------------------------

    def _feed(self, chunk: str) -> list[JobEvent]:
        try:
            return self.cursor.feed(chunk)
        except Exception:
            self.close()
            raise

    def _pause(self, seconds: float, deadline: float | None) -> None:
        seconds = self.cursor.bounded(seconds, deadline)
        if seconds > 0:
            self._sleep(seconds)

    def _connect(self, deadline: float | None, failures: int) -> bool:
        """Open the stream (with retries); False when the deadline passed first."""
        cursor = self.cursor
        while not cursor.passed(deadline):
            try:
                response = self._http.send(cursor.request(self._http, deadline), stream=True)
                if response.status_code not in RETRY_STATUSES:
                    self._opened(response)
                    return True
                pause = cursor.refused_pause(response, failures)
                response.close()
            except httpx.TransportError as error:
                self.close()
                log.debug("no event stream connection (%s)", type(error).__name__)
                pause = cursor.dropped_pause(failures)
            failures = cursor.failed(failures)
            self._pause(pause, deadline)
        return False

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
        self.cursor.started()
        self._response = response
        self._chunks = response.iter_text()
        first = next(self._chunks, None)
        if first is None:
            self.close()
            raise httpx.RemoteProtocolError("the event stream ended before its first bytes")
        self.cursor.ready.extend(self._feed(first))


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
        if event.type == "element":
            continue  # an array's element: the array's own events say when it changes
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
