"""The gateway's job event stream as the SDK reads it, shared by the sync and async readers.

The stream is `GET /api/v2/compute/events` (Server-Sent Events, docs/rest-api.md): each event
is one JSON line of a change of state of one of the caller's jobs (`job`), a member of a
cluster job (`member`), an element of an array job (`element`) or a task (`task`), with an
integer id; `gap` says the server no longer keeps the events after the id the client resumed
from (the client re-reads its jobs).
This module holds what does not depend on how bytes are sent: the request, reading an
answer's status, turning an SSE event into a `JobEvent`, and when to reconnect.

A plain IRI server has no stream: 404 or 405 on the path (or an answer that is not an event
stream) is `StreamUnavailable`, on which `wait()` falls back to polling.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

from iri_gateway.client.calls import retry_pause
from iri_gateway.client.errors import ConnectionFailed, GatewayClientError
from iri_gateway.client.models import API, JobInfo
from iri_gateway.client.sse import ServerSentEvent, SSEDecoder, StreamTooLarge

log = logging.getLogger("iri_gateway.client.events")

EVENTS_PATH = API + "/compute/events"
MAX_JOB_IDS = 100
"""The most job ids one stream may filter on (the server's bound)."""
RECONNECT_LIMIT = 10
"""Connection attempts in a row that may fail before the reader gives up (ConnectionFailed)."""
MAX_RETRY = 60.0
"""The longest pause before reconnecting, in seconds, whatever `retry` the server asks for."""
DEFAULT_RETRY = 2.0
"""The pause before reconnecting, in seconds, until the server sends `retry`."""
IDLE_LIMIT = 60.0
"""Seconds without a byte (the server sends a heartbeat every 15 s by default) after which
the connection counts as dropped and is opened again."""
_MAX_ID_DIGITS = 19
"""The longest event id kept for resuming (a 64-bit integer)."""


class StreamUnavailable(GatewayClientError):
    """The server has no event stream (a plain IRI server): polling is the way to wait."""


class StreamBroken(GatewayClientError):
    """The server sent something the event stream's format does not allow (a bound broken,
    an event that is not the gateway's JSON)."""


@dataclass(frozen=True)
class JobEvent:
    """One event of the stream: `type` is job, member, element, task or gap.

    A job or member event carries `job` (the job as getJob shows it, when the server sent
    it); an element event (an array's) `element` (its index) and its exit code in
    `message` once it ended, no `job`; a task event `task` (the task's JSON); a gap event
    `oldest` and `message` only. `data` is the whole JSON object as sent."""

    id: int
    type: str
    state: str | None = None
    previous: str | None = None
    message: str | None = None
    time: float | None = None
    job_id: str | None = None
    resource_id: str | None = None
    member: str | None = None
    element: int | None = None
    task_id: str | None = None
    job: JobInfo | None = None
    task: dict[str, Any] | None = None
    oldest: int | None = None
    data: dict[str, Any] = field(default_factory=dict)


def stream_params(
    resource: str | None, job_ids: Iterable[str], states: Iterable[str]
) -> httpx.QueryParams:
    """The query of a stream request (filters left out are not sent)."""
    ids = list(dict.fromkeys(job_ids))
    if len(ids) > MAX_JOB_IDS:
        raise ValueError(f"job_ids: at most {MAX_JOB_IDS} job ids per stream, {len(ids)} given")
    params: list[tuple[str, str | int | float | bool | None]] = []
    if resource:
        params.append(("resource", resource))
    params += [("job_id", job_id) for job_id in ids]
    params += [("state", state) for state in dict.fromkeys(states)]
    return httpx.QueryParams(params)


def stream_headers(last_event_id: int | None) -> dict[str, str]:
    headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    return headers


def check_opened(response: httpx.Response, body: bytes) -> None:
    """Raise for an answer that did not open a stream: StreamUnavailable for a server
    without one (404 or 405, carrying the server's detail: a gateway names an unknown
    resource there; or a 2xx that is not `text/event-stream`), the gateway's problem for any
    other error. `body` is the error answer's (bounded) body."""
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if response.status_code >= 400:
        answer = httpx.Response(
            response.status_code, headers=response.headers, content=body, request=response.request
        )
        error = GatewayClientError.from_response(answer)
        if response.status_code in (404, 405):
            raise StreamUnavailable(
                error.status,
                "No event stream",
                f"{EVENTS_PATH} answered {response.status_code}: {error.detail or error.title}",
            )
        raise error
    if kind != "text/event-stream":
        raise StreamUnavailable(
            response.status_code,
            "No event stream",
            f"{EVENTS_PATH} answered {kind or 'no content type'}, not text/event-stream",
        )


def event_id(text: str) -> int | None:
    """An SSE id as the gateway sends it (a decimal integer), or None for anything else."""
    if text.isascii() and text.isdigit() and len(text) <= _MAX_ID_DIGITS:
        return int(text)
    return None


def parse_event(sse: ServerSentEvent) -> JobEvent | None:
    """The JobEvent an SSE event carries; None for an event type this SDK does not know
    (a newer server's). Raises StreamBroken for data that is not the gateway's JSON."""
    if sse.event not in ("job", "member", "element", "task", "gap"):
        log.debug("skipping an event of unknown type %r", sse.event[:40])
        return None
    try:
        data = json.loads(sse.data)
    except ValueError:
        raise StreamBroken(0, "Bad event", f"a {sse.event} event whose data is not JSON") from None
    if not isinstance(data, dict):
        raise StreamBroken(0, "Bad event", f"a {sse.event} event whose data is not an object")
    number = event_id(sse.last_event_id)
    if sse.event == "gap":
        oldest = data.get("oldest")
        return JobEvent(
            id=number or 0,
            type="gap",
            message=_text(data.get("message")),
            oldest=oldest if isinstance(oldest, int) else None,
            data=data,
        )
    if number is None:
        raise StreamBroken(0, "Bad event", f"a {sse.event} event without an integer id")
    job = data.get("job")
    task = data.get("task")
    try:
        info = JobInfo.from_json(job) if isinstance(job, dict) else None
    except (KeyError, ValueError):
        raise StreamBroken(0, "Bad event", f"event {number}: its job is not a job") from None
    when = data.get("time")
    return JobEvent(
        id=number,
        type=sse.event,
        state=_text(data.get("state")),
        previous=_text(data.get("previous")),
        message=_text(data.get("message")),
        time=float(when) if isinstance(when, int | float) else None,
        job_id=_text(data.get("job_id")),
        resource_id=_text(data.get("resource_id")),
        member=_text(data.get("member")),
        element=element if isinstance(element := data.get("element"), int) else None,
        task_id=_text(data.get("task_id")),
        job=info,
        task=task if isinstance(task, dict) else None,
        data=data,
    )


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def reconnect_pause(retry_ms: int | None, failures: int) -> float:
    """Seconds before the next connection attempt: the server's `retry` (else 2 s), doubled
    for each attempt in a row that failed, at most MAX_RETRY."""
    base = DEFAULT_RETRY if retry_ms is None else retry_ms / 1000
    return float(min(base * 2**failures, MAX_RETRY))


def job_event_update(event: JobEvent, job_id: str) -> JobInfo | None:
    """The job as `event` shows it, when the event is the job's own change with the job."""
    if event.type == "job" and event.job_id == job_id and event.job is not None:
        return event.job
    return None


class StreamCursor:
    """What a stream reader knows and decides without sending or sleeping, shared by the
    sync and the async reader: where to resume (the newest event id handed out), the
    server's `retry`, the parser of the current connection, the events read with the first
    bytes, and the clock, timeouts and bounds."""

    def __init__(
        self,
        params: httpx.QueryParams,
        last_event_id: int | None,
        clock: Callable[[], float],
        idle_limit: float,
        reconnect_limit: int,
    ) -> None:
        self.params = params
        self.last_event_id = last_event_id
        self.clock = clock
        self.idle_limit = idle_limit
        self.reconnect_limit = reconnect_limit
        self.retry_ms: int | None = None
        self.decoder = SSEDecoder()
        self.ready: list[JobEvent] = []
        self.deadline: float | None = None
        self.connections = 0
        self.announced: int | None = None
        """The newest id the server named without an event (an `id:` line alone, e.g. the
        live start of a stream): a reconnection resumes from there too."""

    def passed(self, deadline: float | None) -> bool:
        return deadline is not None and self.clock() >= deadline

    def bounded(self, seconds: float, deadline: float | None) -> float:
        """A pause cut short so as not to outlast `deadline`."""
        if deadline is not None:
            seconds = min(seconds, max(0.0, deadline - self.clock()))
        return seconds

    def request(
        self, http: httpx.Client | httpx.AsyncClient, deadline: float | None
    ) -> httpx.Request:
        """The next connection's request: resuming after the newest event handed out; a
        read timeout of `idle_limit`, or less so as not to outlast `deadline`."""
        read = self.idle_limit
        if deadline is not None:
            read = max(0.05, min(read, deadline - self.clock()))
        return http.build_request(
            "GET",
            EVENTS_PATH,
            params=self.params,
            headers=stream_headers(self.resume_from),
            timeout=httpx.Timeout(http.timeout.connect, read=read),
        )

    @property
    def resume_from(self) -> int | None:
        """Where a reconnection resumes: after the newest event handed out or announced."""
        known = [n for n in (self.last_event_id, self.announced) if n is not None]
        return max(known) if known else None

    def lost_position(self) -> JobEvent:
        """A `gap` for a stream that reconnected with no event id to resume from (it had
        seen none): changes made while it was away may be missed, so say so."""
        return JobEvent(
            id=0,
            type="gap",
            message="the event stream reconnected with no event id to resume from: "
            "changes made while it was away may be missing; read your jobs again",
            data={"type": "gap"},
        )

    def refused_pause(self, response: httpx.Response, failures: int) -> float:
        return retry_pause(response, failures)

    def dropped_pause(self, failures: int) -> float:
        return reconnect_pause(self.retry_ms, failures)

    def failed(self, failures: int) -> int:
        """One more failed attempt in a row; ConnectionFailed once there are too many."""
        failures += 1
        if failures >= self.reconnect_limit:
            raise ConnectionFailed(
                0,
                "No answer from the gateway",
                f"{EVENTS_PATH}: {failures} connection attempts in a row failed",
            )
        return failures

    def started(self) -> None:
        """A connection is open: a fresh parser, resuming from the newest id."""
        self.connections += 1
        resume = self.resume_from
        self.decoder = SSEDecoder(last_event_id="" if resume is None else str(resume))

    def feed(self, chunk: str) -> list[JobEvent]:
        """The events `chunk` completes; StreamBroken when it breaks the format's bounds."""
        try:
            raw = self.decoder.feed(chunk)
        except StreamTooLarge as error:
            raise StreamBroken(0, "Event stream too large", str(error)) from None
        if self.decoder.retry is not None:
            self.retry_ms = self.decoder.retry
        named = event_id(self.decoder.last_event_id)
        if named is not None and (self.announced or 0) < named:
            self.announced = named
        return [event for sse in raw if (event := parse_event(sse)) is not None]

    def new(self, event: JobEvent) -> bool:
        """Whether to hand `event` out: not one already handed out (ids only grow)."""
        if event.type != "gap":
            if self.last_event_id is not None and event.id <= self.last_event_id:
                return False
            self.last_event_id = event.id
        return True
