"""`GET /compute/events`: the caller's job, member, element and task state changes, pushed as
Server-Sent Events (an extension; issue 28).

Each stream takes what is new from the process's event hub (one reader of the log for all
streams), keeps the caller's events that match its filters, and sends them with their log
ids: `Last-Event-ID` (the header every SSE client sends when it reconnects, or the
`last_event_id` parameter) resumes after that id from the log itself, so a reconnecting
client misses nothing and sees nothing twice. Another user's events are never read for a
stream: the hub's window is filtered by owner first, and the log is read by owner.

Open streams are bounded per user and per process (`events_streams_per_user`,
`events_streams`); a quiet stream carries a `: keep-alive` comment every
`events_heartbeat` seconds; a draining process ends its streams, so the clients reconnect
elsewhere, with their last id.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from iri_gateway.api.compute.event_data import event_data
from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import EngineDep, PrincipalDep, SettingsDep
from iri_gateway.api.plumbing.problems import ApiProblem
from iri_gateway.models.job import JobState
from iri_gateway.service.events.log import StoredEvent
from iri_gateway.service.jobs.engine import Engine

router = APIRouter(prefix="/api/v2/compute", tags=["extensions"], route_class=CallerFirstRoute)

RETRY_MS = 2000
"""What a client waits before reconnecting (the stream's first line, `retry:`)."""
MAX_JOB_IDS = 100
"""Job ids one stream may filter on."""
LOG_BATCH = 500
"""Events read from the log per query by a stream behind the hub's window."""
CHECK_EVERY = 1.0
"""Seconds a quiet stream waits before it looks whether its process is draining."""
RENDERED = 4096
"""Rendered events kept for the other streams of the same user (a burst of changes is
rendered once, not once per stream)."""


class StreamSlots:
    """How many streams are open, per user and in all, and the bounds."""

    def __init__(self, *, per_user: int, total: int) -> None:
        self.per_user, self.total = per_user, total
        self._open: dict[str, int] = {}
        self._lock = threading.Lock()

    def take(self, user: str) -> None:
        """One more stream for `user`, or the problem saying why not."""
        with self._lock:
            if sum(self._open.values()) >= self.total:
                raise ApiProblem(
                    503,
                    "Service Unavailable",
                    f"this gateway process serves {self.total} event streams already (setting "
                    "`events_streams`); try again shortly, or another replica",
                    headers={"Retry-After": "5"},
                )
            have = self._open.get(user, 0)
            if have >= self.per_user:
                raise ApiProblem(
                    429,
                    "Too Many Requests",
                    f"you have {have} event streams open on this gateway process, the most "
                    f"one user may (setting `events_streams_per_user`: {self.per_user}); one "
                    "stream with several job_id or state filters, or none, serves many jobs",
                    headers={"Retry-After": "5"},
                )
            self._open[user] = have + 1

    def give_back(self, user: str) -> None:
        with self._lock:
            left = self._open.get(user, 0) - 1
            if left > 0:
                self._open[user] = left
            else:
                self._open.pop(user, None)


class Rendered:
    """Rendered events by id, bounded (least recently made first out), shared by the
    process's streams; an entry is only ever read for its owner's stream."""

    def __init__(self, capacity: int = RENDERED) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[int, str] = OrderedDict()
        self._lock = threading.Lock()

    def cached(self, event_id: int) -> str | None:
        """The rendering if made already (quick: on the event loop, where a thousand streams
        sending one event would otherwise each hop to a thread for it)."""
        with self._lock:
            return self._entries.get(event_id)

    def get(self, engine: Engine, event: StoredEvent) -> str:
        """The rendering, made now if it was not (reads the store: off the event loop)."""
        with self._lock:
            found = self._entries.get(event.id)
        if found is not None:
            return found
        text = json.dumps(event_data(engine, event), separators=(",", ":"))
        with self._lock:
            self._entries[event.id] = text
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)
        return text


@dataclass(frozen=True)
class Filters:
    """What one stream wants beyond the caller's own events."""

    owner: str
    resource: str | None
    job_ids: frozenset[str]
    states: frozenset[str]

    def admit(self, event: StoredEvent) -> bool:
        if event.owner != self.owner:
            return False
        if self.resource is not None and event.resource_id != self.resource:
            return False
        if self.job_ids and event.job_id not in self.job_ids:
            return False
        return not self.states or event.state in self.states


def _start(header: str | None, parameter: int | None) -> int | None:
    """Where to resume: the `last_event_id` parameter or the `Last-Event-ID` header (not
    both, unless they agree); None: from now."""
    from_header: int | None = None
    if header is not None and header.strip():
        text = header.strip()
        if not text.isdigit() or len(text) > 19:
            raise ApiProblem(
                400,
                "Bad Request",
                "Last-Event-ID must be an event id this gateway sent (a whole number of at "
                "most 19 digits)",
                [{"name": "Last-Event-ID", "reason": "not an event id"}],
            )
        from_header = int(text)
    if from_header is not None and parameter is not None and from_header != parameter:
        raise ApiProblem(
            400,
            "Bad Request",
            "give the event id to resume after either as Last-Event-ID or as last_event_id, "
            "or the same in both",
            [{"name": "last_event_id", "reason": "differs from the Last-Event-ID header"}],
        )
    return from_header if from_header is not None else parameter


def _frame(event: StoredEvent, data: str) -> str:
    return f"id: {event.id}\nevent: {event.kind}\ndata: {data}\n\n"


@router.get(
    "/events",
    operation_id="getJobEvents",
    summary="Stream the caller's job events (Server-Sent Events)",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "A `text/event-stream`: `retry: 2000`, then one event per state "
            "change of the caller's jobs (`event: job`), cluster job members (`event: "
            "member`), array job elements (`event: element`: `element` the index, the exit "
            "code in `message`, no `job`) and file tasks (`event: task`), each `id: <log "
            "id>` and `data: <one JSON line>` (the change, and the job or task as getJob or "
            "getTask shows it now); `event: gap` first when the resume point is older than "
            "the log keeps; `: keep-alive` comments while quiet. Never another user's events.",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        }
    },
)
async def job_events(
    request: Request,
    engine: EngineDep,
    principal: PrincipalDep,
    settings: SettingsDep,
    resource: Annotated[
        str | None, Query(max_length=63, description="Only the jobs of this resource")
    ] = None,
    job_id: Annotated[
        list[str] | None,
        Query(max_length=MAX_JOB_IDS, description="Only these jobs (repeat the parameter)"),
    ] = None,
    state: Annotated[
        list[JobState] | None,
        Query(description="Only changes to these states (repeat the parameter)"),
    ] = None,
    last_event_id: Annotated[
        int | None,
        Query(
            ge=0,
            le=2**63 - 1,
            description="Resume after this event id (for clients that cannot send the "
            "Last-Event-ID header)",
        ),
    ] = None,
    last_event_id_header: Annotated[
        str | None,
        Header(alias="Last-Event-ID", description="Resume after this event id"),
    ] = None,
) -> StreamingResponse:
    """The caller's events as they happen, or from `Last-Event-ID` on."""
    if resource is not None:
        engine.resource(resource_id=resource)  # unknown: 404 naming the known ones
    start = _start(last_event_id_header, last_event_id)
    filters = Filters(
        owner=principal.user,
        resource=resource,
        job_ids=frozenset(job_id or ()),
        states=frozenset(s.value for s in state or ()),
    )
    slots: StreamSlots = request.app.state.event_streams
    slots.take(principal.user)
    try:
        hub = engine.event_hub
        if not hub.started:
            await run_in_threadpool(hub.start)
        oldest = await run_in_threadpool(engine.events.oldest) if start is not None else None
    except BaseException:
        slots.give_back(principal.user)
        raise
    # Where the stream starts is fixed here, before the 200 goes out: a client that reads its
    # job once it has the stream's first bytes (the SDK's `wait`) misses no change between.
    cursor = hub.cursor if start is None else start
    stream = _stream(request, engine, filters, cursor, start, oldest, settings.events_heartbeat)
    return StreamingResponse(
        _released(stream, slots, principal.user),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _released(
    stream: AsyncIterator[str], slots: StreamSlots, user: str
) -> AsyncIterator[str]:
    try:
        async for chunk in stream:
            yield chunk
    finally:
        slots.give_back(user)


async def _stream(
    request: Request,
    engine: Engine,
    filters: Filters,
    cursor: int,
    start: int | None,
    oldest: int | None,
    heartbeat: float,
) -> AsyncIterator[str]:
    """The stream's text from `cursor` on (`start`: the resume point asked for, if any)."""
    hub = engine.event_hub
    rendered: Rendered = request.app.state.rendered_events
    drain = request.app.state.drain
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()

    def wake() -> None:  # from the hub's thread
        with contextlib.suppress(RuntimeError):  # the loop closed: the stream is over
            loop.call_soon_threadsafe(woken.set)

    unlisten = hub.listen(wake)
    try:
        yield f"retry: {RETRY_MS}\n\n"
        if start is not None and oldest is not None and oldest > start + 1:
            gap = {
                "type": "gap",
                "oldest": oldest,
                "message": f"events after {start} and before {oldest} are no longer kept "
                "(setting `event_retention`): read your jobs again (getJobs), then go on "
                "from here",
            }
            yield f"event: gap\ndata: {json.dumps(gap, separators=(',', ':'))}\n\n"
        quiet = 0.0
        while not drain.draining:
            woken.clear()
            batch, cursor = await _next(engine, filters, cursor)
            for event in batch:
                data = rendered.cached(event.id)
                if data is None:  # the first stream of the process to send it renders it
                    data = await run_in_threadpool(rendered.get, engine, event)
                yield _frame(event, data)
            if batch:
                quiet = 0.0
                continue
            try:
                await asyncio.wait_for(woken.wait(), timeout=min(CHECK_EVERY, heartbeat))
            except TimeoutError:
                quiet += min(CHECK_EVERY, heartbeat)
                if quiet >= heartbeat:
                    quiet = 0.0
                    yield ": keep-alive\n\n"
    finally:
        unlisten()


async def _next(engine: Engine, filters: Filters, cursor: int) -> tuple[list[StoredEvent], int]:
    """The caller's matching events after `cursor`, and the cursor past them: from the
    hub's window, or from the log when the cursor is older than the window."""
    hub = engine.event_hub
    found = hub.since(cursor)
    if found is not None:
        events, through = found
        return [e for e in events if filters.admit(e)], through
    read_up_to = hub.cursor  # every event up to here is committed: none is missed below
    events = await run_in_threadpool(
        engine.events.after, cursor, owner=filters.owner, limit=LOG_BATCH
    )
    through = events[-1].id if events else cursor
    if len(events) < LOG_BATCH:
        through = max(through, read_up_to)
    return [e for e in events if filters.admit(e)], through
