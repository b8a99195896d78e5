"""The asynchronous twin of `GatewayClient`: the same operations, awaited (httpx.AsyncClient).

Requests, retry rules and answer parsing come from `client_calls`, shared with the sync
client; only sending and sleeping differ. Import it from `iri_gateway.client`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx
from rich.console import Console

from iri_gateway.client import calls
from iri_gateway.client.async_event_stream import AsyncEventStream, wait_for_job
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
log = logging.getLogger("iri_gateway.client")


class AsyncGatewayClient:
    """The gateway's compute, extension, filesystem and task operations (asyncio)."""

    def __init__(
        self,
        server: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.server, headers = client_settings(server, token)
        self.retries = retries
        self._http = httpx.AsyncClient(
            base_url=self.server, headers=headers, timeout=timeout, transport=transport
        )
        self._sleep = sleep
        self._clock = clock
        self.has_stream: bool | None = None
        """Whether the server has the job event stream: None until a wait or watch asked."""

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncGatewayClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _run(self, call: Call[T]) -> T:
        """Send `call`, again after no answer or a gateway-unavailable answer (every call is
        safe to repeat, see `client_calls`), after the pause the gateway asks for in
        `Retry-After` (bounded) or a growing one."""
        attempt = 0
        while True:
            try:
                response = await self._http.request(
                    call.method,
                    API + call.path,
                    params=call.params,
                    json=call.json,
                    headers=call.headers,
                )
            except httpx.TransportError as error:
                if attempt < self.retries:
                    await self._sleep(backoff(attempt))
                    attempt += 1
                    continue
                raise ConnectionFailed(
                    0, "No answer from the gateway", f"{self.server}: {error}"
                ) from None
            if response.status_code in RETRY_STATUSES and attempt < self.retries:
                await self._sleep(retry_pause(response, attempt))
                attempt += 1
                continue
            if response.status_code >= 400:
                raise GatewayClientError.from_response(response)
            return call.parse(response)

    # ---- compute ----------------------------------------------------------------------------

    async def submit(
        self,
        resource: str,
        spec: SpecLike,
        idempotency_key: str | None = None,
        project: str | None = None,
    ) -> JobInfo:
        """Submit a job (launchJob), always with an Idempotency-Key (see GatewayClient)."""
        return await self._run(calls.submit(resource, spec, idempotency_key, project))

    async def launch_jobs(
        self,
        resource: str,
        specs: Sequence[SpecLike],
        idempotency_key: str | None = None,
        project: str | None = None,
    ) -> list[LaunchResult]:
        """Launch each spec as its own job in one call (launchJobs; see GatewayClient)."""
        return await self._run(calls.launch_jobs(resource, specs, idempotency_key, project))

    async def status(self, resource: str, job_id: str, *, include_spec: bool = False) -> JobInfo:
        """A job's status (getJob)."""
        return await self._run(calls.status(resource, job_id, include_spec))

    async def jobs(self, resource: str, historical: bool = False) -> list[JobInfo]:
        """The caller's jobs on a resource (getJobs)."""
        return await self._run(calls.jobs(resource, historical))

    async def cancel(self, resource: str, job_id: str) -> None:
        """Ask for the job to be canceled (cancelJob)."""
        await self._run(calls.cancel(resource, job_id))

    async def restart(self, resource: str, job_id: str) -> JobInfo:
        """Run the job again as the same job (restartJob, an extension)."""
        return await self._run(calls.restart(resource, job_id))

    # ---- arrays ------------------------------------------------------------------------------

    async def job_elements(
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
        return await self._run(calls.job_elements(resource, job_id, offset, limit, state))

    async def cancel_elements(
        self, resource: str, job_id: str, indices: str | Sequence[int]
    ) -> None:
        """Cancel these elements of an array job (`"0-9,15"` or a list of indices); the
        others run on (cancelJobElements, an extension). `cancel` ends the whole array."""
        await self._run(calls.cancel_elements(resource, job_id, indices))

    # ---- service ports ----------------------------------------------------------------------

    async def job_ports(self, resource: str, job_id: str) -> list[JobPort]:
        """The service ports the job declared, each with its URL through the gateway's port
        proxy (listJobPorts, an extension)."""
        return await self._run(calls.job_ports(resource, job_id))

    async def open_port(
        self, resource: str, job_id: str, port: str, member: str = "main"
    ) -> PortLink:
        """A link that opens the port in a browser, once, within a minute or so (openJobPort);
        `Conflict` while the job does not run yet, `Gone` once it ended."""
        return await self._run(calls.open_port(resource, job_id, member, port))

    async def forward_port(
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
        """As GatewayClient.forward_port: the forward runs in threads of its own, so it does
        not hold up the event loop; `close()` it when done."""
        ports = await self.job_ports(resource, job_id)
        tunnel = calls.tunnel_of(ports, job_id, member, port)
        return PortForward(
            tunnel,
            calls.bearer_token(self._http.headers),
            host=host,
            local_port=local_port,
            on_error=on_error,
        )

    async def wait(
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
        """Wait until the job is final, on the event stream or, without one (or with
        `use_events=False`), by polling; WaitTimeout (with the last status) after `timeout`
        (see GatewayClient.wait)."""
        deadline = None if timeout is None else self._clock() + timeout
        with status_line(job_id, progress) as line:

            def show(job: JobInfo) -> None:
                line(job)
                if on_update is not None:
                    on_update(job)

            if use_events and self.has_stream is not False:
                stream = self._stream(resource, [job_id], ())
                try:
                    await stream.open(deadline)
                except StreamUnavailable as missing:
                    self._no_stream(missing)
                else:
                    async with stream:
                        self.has_stream = True
                        return await wait_for_job(
                            self, stream, resource, job_id, deadline, timeout, show
                        )
            return await self._poll(resource, job_id, deadline, timeout, poll, max_poll, show)

    async def _poll(
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
            job = await self.status(resource, job_id)
            show(job)
            if job.final:
                return job
            if deadline is not None:
                left = deadline - self._clock()
                if left <= 0:
                    raise WaitTimeout(job, timeout or 0.0)
                interval = min(interval, left)
            await self._sleep(interval)
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
    ) -> AsyncEventStream:
        return AsyncEventStream(
            self._http,
            stream_params(resource, job_ids, states),
            last_event_id=last_event_id,
            sleep=self._sleep,
            clock=self._clock,
        )

    async def watch(
        self,
        resource: str | None = None,
        job_ids: Iterable[str] = (),
        states: Iterable[str] = (),
        *,
        last_event_id: int | None = None,
        timeout: float | None = None,
    ) -> AsyncEventStream:
        """The caller's job events, live, from the event stream, open when this returns (see
        GatewayClient.watch): `async with await gateway.watch(...) as events:` then
        `async for event in events`."""
        deadline = None if timeout is None else self._clock() + timeout
        stream = self._stream(resource, job_ids, states, last_event_id)
        await stream.open(deadline)
        return stream

    async def output(
        self,
        resource: str,
        job_id: str,
        stream: Stream = "stdout",
        tail: int | None = None,
        element: int | None = None,
    ) -> str:
        """A job's stdout or stderr: the last `tail` lines, or all of it (paged by 1 MiB); an
        array's `element`'s (ValueError for an array without one)."""
        job = await self.status(resource, job_id, include_spec=True)
        path = output_path(job, stream, element)
        if tail is not None:
            return (await self.tail(resource, path, lines=tail)).content
        parts: list[str] = []
        offset: int | None = 0
        while offset is not None:
            part = await self.view(resource, path, offset=offset, size=READ_LIMIT)
            parts.append(part.content)
            offset = calls.next_offset(part, offset)
        return "".join(parts)

    # ---- extensions -------------------------------------------------------------------------

    async def plan(self, resource: str, spec: SpecLike) -> Plan:
        """Dry run: runtime, bindings and the exact batch script; 422 lists every problem."""
        return await self._run(calls.plan(resource, spec))

    async def placement(self, spec: SpecLike) -> list[Placement]:
        """Every resource ranked, with the flavour each would use or why it cannot."""
        return await self._run(calls.placement(spec))

    async def capabilities(self, resource: str) -> Capabilities:
        """Runtimes, GPU and MPI bindings, mounts, extra options, hardware, limits."""
        return await self._run(calls.capabilities(resource))

    # ---- job templates (extension) -------------------------------------------------------

    async def templates(self) -> list[StoredTemplate]:
        """The templates you may name in a job: the facility's, then your own."""
        return await self._run(calls.templates())

    async def template(self, name: str) -> StoredTemplate:
        """One template (404 names the closest ones)."""
        return await self._run(calls.template_get(name))

    async def put_template(self, name: str, template: TemplateLike) -> StoredTemplate:
        """Keep a task or cluster template under `name` (created or replaced)."""
        return await self._run(calls.template_put(name, template))

    async def delete_template(self, name: str) -> None:
        """Delete one of your templates (a facility template is 409)."""
        await self._run(calls.template_delete(name))

    async def audit(self, **filters: str | int | None) -> dict[str, Any]:
        """A page of the audit log, newest first (`GET /audit`; facility admins)."""
        return await self._run(calls.audit(filters))

    # ---- filesystem and tasks -----------------------------------------------------------------

    async def task_result(
        self, operation: str, resource: str, body: Mapping[str, Any], timeout: float = 60.0
    ) -> dict[str, Any]:
        """Run a task-based filesystem operation and return its task's `result`."""
        task_id = await self._run(calls.task_submit(operation, resource, body))
        deadline = self._clock() + timeout
        interval = 0.1
        while True:
            task = await self._run(calls.task_get(task_id))
            result = calls.task_outcome(operation, task_id, task)
            if result is not None:
                return result
            if self._clock() >= deadline:
                raise GatewayClientError(
                    504, "Task not finished", f"{operation} task {task_id} is still running"
                )
            await self._sleep(interval)
            interval = min(interval * 2, 2.0)

    async def tail(
        self, resource: str, path: str, *, lines: int | None = None, nbytes: int | None = None
    ) -> FileContent:
        """The end of a file (official `tail`)."""
        body = {"path": path, "lines": lines, "bytes": nbytes}
        return FileContent.from_result(await self.task_result("tail", resource, body))

    async def view(
        self, resource: str, path: str, *, offset: int = 0, size: int = READ_LIMIT
    ) -> FileContent:
        """`size` bytes from `offset` (official `view`)."""
        body = {"path": path, "offset": offset, "size": size}
        return FileContent.from_result(await self.task_result("view", resource, body))
