"""Reading the job event stream with httpx.AsyncClient: the twin of `client.event_stream`.

`EventStream` opens `GET /api/v2/compute/events` with the caller's filters and hands out
`JobEvent`s. When the connection drops (the server restarted, a proxy cut it, nothing came
for `IDLE_LIMIT` seconds, a draining server ended it) it connects again after the server's
`retry` pause (doubled for each failed attempt in a row, at most a minute) with
`Last-Event-ID`, so the server replays what was missed: nothing lost, and an event id seen
once is never handed out twice. `gap` events (the server no longer keeps what was missed)
are handed out too: the caller re-reads its jobs.

`wait_for_job` is `GatewayClient.wait` on the stream: the stream is open (its first bytes
read, so its start is fixed) before the job is read once, so a change made at any moment is
either in that read or on the stream. What does not send or sleep is `events.StreamCursor`,
shared with the sync reader; only sending and sleeping are awaited here.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
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
    from iri_gateway.client.async_client import AsyncGatewayClient

log = logging.getLogger("iri_gateway.client.events")
ERROR_BODY_LIMIT = 64 * 1024
"""The most of an error answer's body read (its problem+json)."""


class AsyncEventStream:
    """The caller's job events, from one stream kept open (see the module docstring)."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        params: httpx.QueryParams,
        *,
        last_event_id: int | None = None,
        sleep: Callable[[float], Awaitable[None]],
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
        self._chunks: AsyncIterator[str] | None = None

    async def __aenter__(self) -> AsyncEventStream:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection (a later `events` call opens it again)."""
        if self._response is not None:
            await self._response.aclose()
        self._response = None
        self._chunks = None

    async def open(self, deadline: float | None = None) -> None:
        """Connect and read the server's first bytes. Raises StreamUnavailable when the
        server has no stream, the gateway's error when it refuses, ConnectionFailed after
        `reconnect_limit` failed attempts. Iterating the stream then hands out the events
        until `deadline`."""
        self.cursor.deadline = deadline
        await self._connect(deadline, failures=0)

    def __aiter__(self) -> AsyncIterator[JobEvent]:
        return self.events(self.cursor.deadline)

    async def events(self, deadline: float | None = None) -> AsyncIterator[JobEvent]:
        """The events, live, until `deadline` (a `clock` time) passes; forever without one."""
        cursor = self.cursor
        while True:
            if self._chunks is None:
                blind = cursor.connections > 0 and cursor.resume_from is None
                if not await self._connect(deadline, 0):
                    return
                if blind:
                    yield cursor.lost_position()
            while cursor.ready:
                event = cursor.ready.pop(0)
                if cursor.new(event):
                    yield event
            assert self._chunks is not None
            try:
                async for chunk in self._chunks:
                    for event in await self._feed(chunk):
                        if cursor.new(event):
                            yield event
                    if cursor.passed(deadline):
                        return
                log.debug("the event stream ended; reconnecting")
            except httpx.TransportError as error:
                log.debug("the event stream dropped (%s); reconnecting", type(error).__name__)
            await self.aclose()
            if cursor.passed(deadline):
                return
            await self._pause(cursor.dropped_pause(0), deadline)

    # ---- inside -------------------------------------------------------------------------------

    async def _feed(self, chunk: str) -> list[JobEvent]:
        try:
            return self.cursor.feed(chunk)
        except Exception:
            await self.aclose()
            raise

    async def _pause(self, seconds: float, deadline: float | None) -> None:
        seconds = self.cursor.bounded(seconds, deadline)
        if seconds > 0:
            await self._sleep(seconds)

    async def _connect(self, deadline: float | None, failures: int) -> bool:
        """Open the stream (with retries); False when the deadline passed first."""
        cursor = self.cursor
        while not cursor.passed(deadline):
            try:
                request = cursor.request(self._http, deadline)
                response = await self._http.send(request, stream=True)
                if response.status_code not in RETRY_STATUSES:
                    await self._opened(response)
                    return True
                pause = cursor.refused_pause(response, failures)
                await response.aclose()
            except httpx.TransportError as error:
                await self.aclose()
                log.debug("no event stream connection (%s)", type(error).__name__)
                pause = cursor.dropped_pause(failures)
            failures = cursor.failed(failures)
            await self._pause(pause, deadline)
        return False

    async def _opened(self, response: httpx.Response) -> None:
        if response.status_code >= 400:
            body = bytearray()
            try:
                async for part in response.aiter_bytes():
                    body += part
                    if len(body) >= ERROR_BODY_LIMIT:
                        break
            finally:
                await response.aclose()
            check_opened(response, bytes(body[:ERROR_BODY_LIMIT]))
        try:
            check_opened(response, b"")
        except Exception:
            await response.aclose()
            raise
        self.cursor.started()
        self._response = response
        self._chunks = response.aiter_text()
        first = await anext(self._chunks, None)
        if first is None:
            await self.aclose()
            raise httpx.RemoteProtocolError("the event stream ended before its first bytes")
        self.cursor.ready.extend(await self._feed(first))


async def wait_for_job(
    client: AsyncGatewayClient,
    stream: AsyncEventStream,
    resource: str,
    job_id: str,
    deadline: float | None,
    timeout: float | None,
    show: Callable[[JobInfo], None],
) -> JobInfo:
    """Wait on an open stream filtered to the job; WaitTimeout at `deadline`."""
    job = await client.status(resource, job_id)
    show(job)
    if job.final:
        return job
    async for event in stream.events(deadline):
        if event.type == "element":
            continue  # an array's element: the array's own events say when it changes
        seen = job_event_update(event, job_id)
        if event.type == "gap" or (seen is None and event.job_id == job_id):
            seen = await client.status(resource, job_id)
        if seen is None:
            continue
        job = seen
        show(job)
        if job.final:
            return job
    raise WaitTimeout(job, timeout or 0.0)
