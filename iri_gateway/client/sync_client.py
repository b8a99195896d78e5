"""The synchronous client, `GatewayClient`; import it from `iri_gateway.client`.

Requests, retry rules and answer parsing come from `client.calls`, shared with the async
client (`client.async_client`); this module only sends them with httpx.Client and sleeps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx
from rich.console import Console

from iri_gateway.client import calls
from iri_gateway.client.calls import (
    RETRY_STATUSES,
    Call,
    SpecLike,
    TemplateLike,
    backoff,
    client_settings,
    retry_pause,
)
from iri_gateway.client.errors import ConnectionFailed, GatewayClientError
from iri_gateway.client.event_stream import EventStream, wait_for_job
from iri_gateway.client.events import StreamUnavailable, stream_params
from iri_gateway.client.models import (
    API,
    READ_LIMIT,
    ElementPage,
    FileContent,
    JobInfo,
    JobPort,
    LaunchResult,
    PortLink,
    Stream,
    WaitTimeout,
    output_path,
)
from iri_gateway.client.port_forward import PortForward
from iri_gateway.client.progress import status_line
from iri_gateway.models.job_templates import StoredTemplate
from iri_gateway.models.placement import Placement
from iri_gateway.models.plan import Plan
from iri_gateway.profiles.capabilities import Capabilities

T = TypeVar("T")
DEFAULT_RETRIES = 3
log = logging.getLogger("iri_gateway.client")


class GatewayClient:
    """The gateway's compute, extension, filesystem and task operations (synchronous)."""

    def __init__(
        self,
        server: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = DEFAULT_RETRIES,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.server, headers = client_settings(server, token)
        self.retries = retries
        self._http = httpx.Client(
            base_url=self.server, headers=headers, timeout=timeout, transport=transport
        )
        self._sleep = sleep
        self._clock = clock
        self.has_stream: bool | None = None
        """Whether the server has the job event stream: None until a wait or watch asked."""

    # ---- plumbing ---------------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def _run(self, call: Call[T]) -> T:
        """Send `call`, again after no answer or a gateway-unavailable answer (every call is
        safe to repeat, see `client_calls`), after the pause the gateway asks for in
        `Retry-After` (bounded) or a growing one."""
        attempt = 0
        while True:
            try:
                response = self._http.request(
                    call.method,
                    API + call.path,
                    params=call.params,
                    json=call.json,
                    headers=call.headers,
                )
            except httpx.TransportError as error:
                if attempt < self.retries:
                    self._sleep(backoff(attempt))
                    attempt += 1
                    continue
                raise ConnectionFailed(
                    0, "No answer from the gateway", f"{self.server}: {error}"
                ) from None
            if response.status_code in RETRY_STATUSES and attempt < self.retries:
                self._sleep(retry_pause(response, attempt))
                attempt += 1
                continue
            if response.status_code >= 400:
                raise GatewayClientError.from_response(response)
            return call.parse(response)

    # ---- compute ----------------------------------------------------------------------------

    def submit(
        self,
        resource: str,
        spec: SpecLike,
        idempotency_key: str | None = None,
        project: str | None = None,
    ) -> JobInfo:
        """Submit a job (launchJob). Sent with `idempotency_key`, else a fresh key, so a
        retry after a lost answer returns the job the first attempt made."""
        return self._run(calls.submit(resource, spec, idempotency_key, project))

    def launch_jobs(
        self,
        resource: str,
        specs: Sequence[SpecLike],
        idempotency_key: str | None = None,
        project: str | None = None,
    ) -> list[LaunchResult]:
        """Launch each spec as its own job in one call (launchJobs, an extension): one
        `LaunchResult` per spec, in order, its job or its refusal (an invalid spec never
        fails the others). Sent with `idempotency_key`, else a fresh key; spec i's own key
        is `<key>#<i>`, so a retry after a lost answer returns the jobs the first call made
        and makes none twice."""
        return self._run(calls.launch_jobs(resource, specs, idempotency_key, project))

    def status(self, resource: str, job_id: str, *, include_spec: bool = False) -> JobInfo:
        """A job's status (getJob)."""
        return self._run(calls.status(resource, job_id, include_spec))

    def jobs(self, resource: str, historical: bool = False) -> list[JobInfo]:
        """The caller's jobs on a resource (getJobs); finished ones too with `historical`."""
        return self._run(calls.jobs(resource, historical))

    def cancel(self, resource: str, job_id: str) -> None:
        """Ask for the job to be canceled (cancelJob); `wait` sees it end."""
        self._run(calls.cancel(resource, job_id))

    def restart(self, resource: str, job_id: str) -> JobInfo:
        """Run the job again as the same job, every member of a cluster job with it
        (restartJob, an extension); the job is back in `queued`, its history keeps the
        earlier run. `wait` sees the new run end."""
        return self._run(calls.restart(resource, job_id))

    # ---- arrays ------------------------------------------------------------------------------

    def job_elements(
        self,
        resource: str,
        job_id: str,
        *,
        offset: int = 0,
        limit: int = 100,
        state: str | None = None,
    ) -> ElementPage:
        """A page of an array job's elements with their states and exit codes
        (listJobElements, an extension); `state` keeps only the elements in it."""
        return self._run(calls.job_elements(resource, job_id, offset, limit, state))

    def cancel_elements(self, resource: str, job_id: str, indices: str | Sequence[int]) -> None:
        """Cancel these elements of an array job (`"0-9,15"` or a list of indices); the
        others run on (cancelJobElements, an extension). `cancel` ends the whole array."""
        self._run(calls.cancel_elements(resource, job_id, indices))

    # ---- service ports ----------------------------------------------------------------------

    def job_ports(self, resource: str, job_id: str) -> list[JobPort]:
        """The service ports the job declared, each with its URL through the gateway's port
        proxy (listJobPorts, an extension)."""
        return self._run(calls.job_ports(resource, job_id))

    def open_port(self, resource: str, job_id: str, port: str, member: str = "main") -> PortLink:
        """A link that opens the port in a browser, once, within a minute or so (openJobPort);
        `Conflict` while the job does not run yet, `Gone` once it ended."""
        return self._run(calls.open_port(resource, job_id, member, port))

    def forward_port(
        self,
        resource: str,
        job_id: str,
        port: str,
        member: str = "main",
        *,
        local_port: int = 0,
        host: str = "127.0.0.1",
        on_error: Callable[[GatewayClientError], None] | None = None,
    ) -> PortForward:
        """Forward `host:local_port` (0: a free port, see `.address`) to the job's port
        through the gateway, for services that do not speak HTTP; use it as a context
        manager, or `start()` and `close()` it. Each local connection gets a tunnel of its
        own; one the gateway refuses (the job not running yet, or ended) is closed and its
        error handed to `on_error`."""
        tunnel = calls.tunnel_of(self.job_ports(resource, job_id), job_id, member, port)
        return PortForward(
            tunnel,
            calls.bearer_token(self._http.headers),
            host=host,
            local_port=local_port,
            on_error=on_error,
        )

    def wait(
        self,
        resource: str,
        job_id: str,
        timeout: float | None = None,
        poll: float = 0.2,
        *,
        max_poll: float = 5.0,
        on_update: Callable[[JobInfo], None] | None = None,
        progress: bool | Console = False,
        use_events: bool = True,
    ) -> JobInfo:
        """Wait until the job is final and return it.

        Listens to the gateway's job event stream (one request, then one read of the job),
        or, on a server without the stream (a plain IRI server) or with `use_events=False`,
        polls (intervals grow from `poll` to `max_poll` seconds). `on_update` sees every
        status read or received; `progress` draws a live status line on stderr (or on the
        Console given). Raises WaitTimeout, with the last status, when `timeout` seconds run
        out.
        """
        deadline = None if timeout is None else self._clock() + timeout
        with status_line(job_id, progress) as line:

            def show(job: JobInfo) -> None:
                line(job)
                if on_update is not None:
                    on_update(job)

            if use_events and self.has_stream is not False:
                stream = self._stream(resource, [job_id], ())
                try:
                    stream.open(deadline)
                except StreamUnavailable as missing:
                    self._no_stream(missing)
                else:
                    with stream:
                        self.has_stream = True
                        return wait_for_job(self, stream, resource, job_id, deadline, timeout, show)
            return self._poll(resource, job_id, deadline, timeout, poll, max_poll, show)

    def _poll(
        self,
        resource: str,
        job_id: str,
        deadline: float | None,
        timeout: float | None,
        poll: float,
        max_poll: float,
        show: Callable[[JobInfo], None],
    ) -> JobInfo:
        interval = poll
        while True:
            job = self.status(resource, job_id)
            show(job)
            if job.final:
                return job
            if deadline is not None:
                left = deadline - self._clock()
                if left <= 0:
                    raise WaitTimeout(job, timeout or 0.0)
                interval = min(interval, left)
            self._sleep(interval)
            interval = calls.next_interval(interval, poll, max_poll)

    def _no_stream(self, missing: StreamUnavailable) -> None:
        if self.has_stream is None:
            log.debug("%s has no job event stream (%s); waiting by polling", self.server, missing)
        self.has_stream = False

    def _stream(
        self,
        resource: str | None,
        job_ids: Iterable[str],
        states: Iterable[str],
        last_event_id: int | None = None,
    ) -> EventStream:
        return EventStream(
            self._http,
            stream_params(resource, job_ids, states),
            last_event_id=last_event_id,
            sleep=self._sleep,
            clock=self._clock,
        )

    def watch(
        self,
        resource: str | None = None,
        job_ids: Iterable[str] = (),
        states: Iterable[str] = (),
        *,
        last_event_id: int | None = None,
        timeout: float | None = None,
    ) -> EventStream:
        """The caller's job events, live, from the gateway's event stream: each change of
        state of a job (`type` job), a member of a cluster job (member) or a task (task), with
        the job as getJob shows it; `gap` when the server no longer keeps events the stream
        missed (re-read the jobs then). Filters: a resource, job ids (at most 100), states.
        Reconnects with Last-Event-ID after a dropped connection, so nothing is missed; from
        `last_event_id` when given, else from the moment `watch` returns: the stream is open
        then. Iterating ends after `timeout` seconds, if given. Raises StreamUnavailable on a
        server without the stream.

            with gateway.watch("local", [job.id]) as events:
                for event in events:
                    print(event.job_id, event.state)
        """
        deadline = None if timeout is None else self._clock() + timeout
        stream = self._stream(resource, job_ids, states, last_event_id)
        stream.open(deadline)
        return stream

    def output(
        self,
        resource: str,
        job_id: str,
        stream: Stream = "stdout",
        tail: int | None = None,
        element: int | None = None,
    ) -> str:
        """A job's stdout or stderr: the last `tail` lines, or all of it (paged by 1 MiB); an
        array's `element`'s (ValueError for an array without one)."""
        job = self.status(resource, job_id, include_spec=True)
        path = output_path(job, stream, element)
        if tail is not None:
            return self.tail(resource, path, lines=tail).content
        parts: list[str] = []
        offset: int | None = 0
        while offset is not None:
            part = self.view(resource, path, offset=offset, size=READ_LIMIT)
            parts.append(part.content)
            offset = calls.next_offset(part, offset)
        return "".join(parts)

    # ---- extensions -------------------------------------------------------------------------

    def plan(self, resource: str, spec: SpecLike) -> Plan:
        """Dry run: runtime, bindings and the exact batch script; 422 lists every problem."""
        return self._run(calls.plan(resource, spec))

    def placement(self, spec: SpecLike) -> list[Placement]:
        """Every resource ranked (runnable first, best flavour first), reasons for the others."""
        return self._run(calls.placement(spec))

    def capabilities(self, resource: str) -> Capabilities:
        """Runtimes, GPU and MPI bindings, mounts, extra options, hardware, limits."""
        return self._run(calls.capabilities(resource))

    # ---- job templates (extension) -------------------------------------------------------

    def templates(self) -> list[StoredTemplate]:
        """The templates you may name in a job: the facility's, then your own."""
        return self._run(calls.templates())

    def template(self, name: str) -> StoredTemplate:
        """One template (404 names the closest ones)."""
        return self._run(calls.template_get(name))

    def put_template(self, name: str, template: TemplateLike) -> StoredTemplate:
        """Keep a task or cluster template under `name` (created or replaced)."""
        return self._run(calls.template_put(name, template))

    def delete_template(self, name: str) -> None:
        """Delete one of your templates (a facility template is 409)."""
        self._run(calls.template_delete(name))

    # ---- the audit log (extension, facility admins) ----------------------------------------

    def audit(self, **filters: str | int | None) -> dict[str, Any]:
        """A page of the audit log, newest first (`GET /audit`; filters `user`, `operation`,
        `since`, `until` as ISO 8601 with a time zone, `offset`, `limit`)."""
        return self._run(calls.audit(filters))

    # ---- filesystem and tasks -----------------------------------------------------------------

    def task_result(
        self, operation: str, resource: str, body: Mapping[str, Any], timeout: float = 60.0
    ) -> dict[str, Any]:
        """Run a task-based filesystem operation and return its task's `result`."""
        task_id = self._run(calls.task_submit(operation, resource, body))
        deadline = self._clock() + timeout
        interval = 0.1
        while True:
            task = self._run(calls.task_get(task_id))
            result = calls.task_outcome(operation, task_id, task)
            if result is not None:
                return result
            if self._clock() >= deadline:
                raise GatewayClientError(
                    504, "Task not finished", f"{operation} task {task_id} is still running"
                )
            self._sleep(interval)
            interval = min(interval * 2, 2.0)

    def tail(
        self, resource: str, path: str, *, lines: int | None = None, nbytes: int | None = None
    ) -> FileContent:
        """The end of a file (official `tail`): last `lines` lines or `nbytes` bytes."""
        body = {"path": path, "lines": lines, "bytes": nbytes}
        return FileContent.from_result(self.task_result("tail", resource, body))

    def head(
        self, resource: str, path: str, *, lines: int | None = None, nbytes: int | None = None
    ) -> FileContent:
        """The start of a file (official `head`)."""
        body = {"path": path, "lines": lines, "bytes": nbytes}
        return FileContent.from_result(self.task_result("head", resource, body))

    def view(
        self, resource: str, path: str, *, offset: int = 0, size: int = READ_LIMIT
    ) -> FileContent:
        """`size` bytes from `offset` (official `view`)."""
        body = {"path": path, "offset": offset, "size": size}
        return FileContent.from_result(self.task_result("view", resource, body))

    def ls(
        self, resource: str, path: str, *, recursive: bool = False, show_hidden: bool = False
    ) -> list[dict[str, Any]]:
        """A directory's entries (official `ls`)."""
        body = {"path": path, "recursive": recursive, "showHidden": show_hidden}
        entries: list[dict[str, Any]] = self.task_result("ls", resource, body).get("output", [])
        return entries

    def stat(self, resource: str, path: str, *, dereference: bool = False) -> dict[str, Any]:
        """The `stat` of a file (official `stat`)."""
        body = {"path": path, "dereference": dereference}
        info: dict[str, Any] = self.task_result("stat", resource, body).get("output", {})
        return info
