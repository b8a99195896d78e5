"""Where the gateway's file work runs: always in a file agent, a separate process with limits,
locally exactly as over SSH.

Why: reading a tree, matching a `match_pattern`, packing or unpacking an archive work on what
users made, and a user can make it pathological (a pattern that backtracks for days, a tree
or an archive built to be slow). Run in the serving process, such work held the interpreter
and stalled every request. So the reader, the writer and the archiver are only ever run by
the agent program (`shipping.FILE_AGENT`: the three modules, `tarheaders` and `supervisor`
of `remote`, packed by `shipping`, sent with `python3 -I -c` to a login node, or run with the
gateway's own interpreter, `-I` too, on this machine): its watchdog forks a worker per
request with CPU-time and address-space limits and a wall time (`AgentLimits`, from the
settings), kills it at once on a cancel, and answers why it stopped.

Speed: a fresh interpreter costs tens of milliseconds, which `ls` and `stat` must not pay
each time. Over a transport that can keep commands running cheaply (this machine's: `warm`
> 0) a few agents are kept started and take one request after the other (`_Pool`); a fork
per request stays (the limits and the kill need it; about a millisecond). An agent whose
stream failed, or whose request was canceled, is ended, not reused. Over SSH every request
starts its own agent as before (a channel and a login shell per request; pooling channels is
left for later), with the same program and the same request lines.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from iri_gateway.service.files import shipping
from iri_gateway.service.files.remote import supervisor
from iri_gateway.transport.base import Stream, Transport, TransportError, streaming

Progress = Callable[[dict[str, Any]], None]
"""Called with a long change's counts as it goes; what it raises stops the change."""

READS = ("stat", "ls", "head", "tail", "view", "range")
"""The reader's operations: the short ones, under the read limits."""
POLL = 0.2
"""Seconds between two looks at a long operation's progress callback while the agent says
nothing (so that a cancel is seen even while the work is stuck in one step)."""
LINE_LIMIT = 16 * 1024**2
"""Longest line an agent may answer (a read's answer carries up to 1 MiB, in base64)."""
_MARGIN = 30.0
"""Seconds the gateway waits beyond an agent's wall time for its answer (the agent answers
its own wall time; this only bounds a lost one)."""


@dataclass(frozen=True)
class AgentLimits:
    """What one request's worker may use (`settings.Settings.file_agent_*`): CPU seconds and
    wall seconds for a read (`READS`) and for anything else, and bytes of address space."""

    read_cpu: float = 60.0
    cpu: float = 600.0
    read_wall: float = 120.0
    wall: float = 600.0
    memory: int = 2 * 1024**3
    warm: int = 4
    """Agents kept started on a transport that allows it (this machine's)."""

    def of(self, operation: str) -> dict[str, float]:
        """The limits sent with a request for `operation`."""
        read = operation in READS
        return {
            "cpu": self.read_cpu if read else self.cpu,
            "wall": self.read_wall if read else self.wall,
            "memory": float(self.memory),
        }


class AgentError(TransportError):
    """The agent could not answer: it could not be started, its stream failed, or its
    worker was killed from outside. Transient: ask again."""

    code = "file_agent_error"


class Agents:
    """The file agents of one transport (one resource and account): `run` a request, or
    `run_reporting` a long one with progress and cancel."""

    def __init__(
        self, transport: Transport, *, where: str, limits: AgentLimits, warm: int = 0
    ) -> None:
        self.transport, self.where, self.limits = transport, where, limits
        self._pool = _Pool(self, warm)

    def argv(self) -> list[str]:
        return [self.transport.python, "-I", "-c", shipping.program(shipping.FILE_AGENT)]

    def request(self, request: dict[str, Any], **extra: Any) -> bytes:
        limits = self.limits.of(str(request.get("op")))
        return json.dumps({**request, "limits": limits, **extra}).encode() + b"\n"

    def timeout(self, request: dict[str, Any] | None = None) -> float:
        """Seconds to wait for an agent's words: `request`'s wall time and a margin (without
        one: the longest wall time, for an agent that may take any request)."""
        if request is None:
            return max(self.limits.wall, self.limits.read_wall) + _MARGIN
        return self.limits.of(str(request.get("op")))["wall"] + _MARGIN

    def run(self, request: dict[str, Any], *, idempotent: bool) -> dict[str, Any]:
        """The agent's answer to `request` (`{"ok": ...}`)."""
        if self._pool.size:
            with self._pool.lease(self.request(request, watch=True)) as lease:
                answer = _answer(lease.stream, self.where)
                lease.keep = True
                return _checked(answer, self.where)
        result = self.transport.run(
            self.argv(),
            stdin=self.request(request).decode(),
            timeout=self.timeout(request),
            idempotent=idempotent,
        )
        if result.exit_code in (126, 127):
            raise AgentError(
                f"the filesystem operations on {self.where} need python3 (3.9 or later) on "
                f"the login node, run as the user's account; it could not be run: "
                f"{result.describe()}"
            )
        if not result.ok:
            raise AgentError(f"the file agent failed on {self.where}: {result.describe()}")
        # The answer is the last line: a login script may print before the agent runs.
        lines = result.stdout.strip().splitlines()
        said = _parsed(lines[-1].encode() if lines else b"")
        if "ok" not in said:
            raise AgentError(
                f"the file agent on {self.where} answered no JSON: {result.stdout[:200]!r}"
            )
        return _checked(said, self.where)

    def run_reporting(self, request: dict[str, Any], progress: Progress) -> dict[str, Any]:
        """`run`, with `progress` called with the work's counts as it goes (and every
        `POLL` seconds with the last ones while the agent says nothing). Whatever `progress`
        raises stops the work: a `cancel` line is sent (the agent's watchdog kills a worker
        that does not stop within a moment and removes what it left) and, once the agent
        answered, the error is raised here."""
        every = float(getattr(progress, "interval", supervisor.PROGRESS_EVERY))
        with self._pool.lease(self.request(request, watch=True, progress=every)) as lease:
            lines: queue.Queue[bytes | BaseException] = queue.Queue()
            threading.Thread(
                target=_pump,
                args=(lease.stream, lines, self.where),
                daemon=True,
                name="file-agent-lines",
            ).start()
            # Before the work's first counts the callback still gets called (with none),
            # so that a cancel is seen while the work is stuck before it counts anything.
            counts: dict[str, Any] = {}
            stopped: BaseException | None = None
            while True:
                try:
                    line: bytes | BaseException | None = lines.get(timeout=POLL)
                except queue.Empty:
                    line = None  # nothing said: the progress callback is called all the same
                if isinstance(line, BaseException):
                    raise line
                if line == b"":
                    raise AgentError(
                        f"the file agent on {self.where} ended without an "
                        f"answer: {lease.stream.stderr().strip()[-300:]!r}"
                    )
                said = _parsed(line or b"")
                if "ok" in said:
                    if stopped is not None:
                        raise stopped
                    lease.keep = True
                    return _checked(said, self.where)
                if isinstance(said.get("progress"), dict):
                    counts = dict(said["progress"])
                if stopped is None:
                    try:
                        progress(counts)
                    except Exception as error:
                        stopped = error
                        lease.stream.send(b"cancel\n")

    def close(self) -> None:
        self._pool.close()


def _checked(answer: dict[str, Any], where: str) -> dict[str, Any]:
    """`answer`, unless its worker was killed from outside (AgentError: transient)."""
    if answer.get("ok") is False and answer.get("error") == "died":
        raise AgentError(f"on {where}: {answer.get('detail')}")
    return answer


def _parsed(line: bytes) -> dict[str, Any]:
    try:
        said = json.loads(line)
    except ValueError:
        return {}  # a login script's words
    return said if isinstance(said, dict) else {}


def _answer(stream: Stream, where: str) -> dict[str, Any]:
    """The agent's next answer line (other lines skipped); AgentError when the output ends
    first."""
    while True:
        line = _line(stream, where)
        if not line:
            raise AgentError(
                f"the file agent on {where} ended without an answer: "
                f"{stream.stderr().strip()[-300:]!r}"
            )
        said = _parsed(line)
        if "ok" in said:
            return said


def _line(stream: Stream, where: str) -> bytes:
    """The agent's next whole line (b"" at the end of its output)."""
    line = stream.readline(LINE_LIMIT)
    if line and not line.endswith(b"\n") and len(line) >= LINE_LIMIT:
        raise AgentError(
            f"the file agent on {where} answered a line longer than {LINE_LIMIT} bytes"
        )
    return line


def _pump(stream: Stream, lines: queue.Queue[bytes | BaseException], where: str) -> None:
    """Put `stream`'s lines into `lines` until its answer line; b"" at its end, or the
    error that stopped the reading."""
    try:
        while True:
            line = _line(stream, where)
            lines.put(line)
            if not line or "ok" in _parsed(line):
                return
    except BaseException as error:
        lines.put(error)


class _Lease:
    """One agent lent for one request: kept for the next one only if `keep` was set."""

    def __init__(self, stack: ExitStack, stream: Stream) -> None:
        self.stack, self.stream, self.keep = stack, stream, False


class _Pool:
    """Up to `size` idle agents of one transport, started on demand, ended when not kept."""

    def __init__(self, agents: Agents, size: int) -> None:
        self.agents, self.size = agents, size
        self._idle: list[_Lease] = []
        self._lock = threading.Lock()

    @contextmanager
    def lease(self, request: bytes) -> Iterator[_Lease]:
        """An agent that was sent `request` (its first line): an idle one, or a new one. An
        idle agent that died meanwhile (killed, say) refuses the line at once, before it
        could have been read: it is ended and the next is tried, so that this is never the
        caller's failure."""
        lease = self._sent(request)
        lease.keep = False
        try:
            yield lease
        finally:
            with self._lock:
                kept = lease.keep and len(self._idle) < self.size
                if kept:
                    self._idle.append(lease)
            if not kept:
                lease.stack.close()

    def _sent(self, request: bytes) -> _Lease:
        while True:
            with self._lock:
                idle = self._idle.pop() if self._idle else None
            if idle is None:
                break
            try:
                idle.stream.send(request)
            except TransportError:
                idle.stack.close()
                continue
            return idle
        stack = ExitStack()
        try:
            stream = stack.enter_context(
                streaming(self.agents.transport, f"the file agent on {self.agents.where}").stream(
                    self.agents.argv(), timeout=self.agents.timeout()
                )
            )
            stream.send(request)
        except BaseException:
            stack.close()
            raise
        return _Lease(stack, stream)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for lease in idle:
            lease.stack.close()
