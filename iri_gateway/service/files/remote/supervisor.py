"""The file agent's watchdog: every request is worked on by a forked child with limits, which
a cancel, the end of the input or the wall time kills at once.

Why: a request may be made to take unbounded CPU or memory (a `match_pattern` such as `(a+)+$`
over a long name backtracks for days inside the regex engine, in C, holding the interpreter;
an archive may be built to be slow to parse). Such work must never run in the serving
process, and a cancel must not wait for it to come back to Python code (it may never). So
the agent (this module's `main`, run with the reader, writer and archiver as one program,
locally as over SSH: `agents.program`) does no work itself: it reads one JSON request per
line, forks a *worker* for it and watches. The worker sets its own resource limits from the
request (`limits`: `cpu` seconds of CPU time, `memory` bytes of address space), does the
work and writes its progress lines and its answer into a pipe; the watchdog relays whole
lines to stdout (a killed worker never leaves half a line), and meanwhile reads stdin: a
`cancel` line, or the end of the input when the request said `watch` (the gateway went
away; so does a progress line it cannot deliver), sends the worker SIGUSR1 (the work stops
at its next step and removes what it wrote), and SIGKILL `GRACE` seconds later if it did
not; past the request's `wall` seconds it is killed too. Whatever a killed worker left is
removed then (`_clean`: the hidden `.iri-work-*` names of dead writers next to the target,
`writer.remove_stale_work`), and the answer says why it stopped: `canceled`, or `limit`
naming the limit, its value and what to do, or `died` (killed from outside: the gateway
takes that for a transient fault).

After the answer the watchdog reads the next request, so one agent serves many requests
one after the other (the gateway keeps a few warm: `agents.AgentPool`); a fork costs about
a millisecond, a fresh interpreter tens. Runs on the login node's `python3` (3.9 or later),
standard library only.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

GRACE = 0.5
"""Seconds a worker asked to stop has to clean up and answer before it is killed."""
DEFAULT_LIMITS = {"cpu": 600.0, "memory": 2 * 1024**3, "wall": 600.0}
"""Limits of a request that names none (the gateway always names them)."""
PROGRESS_EVERY = 0.25
"""Seconds between two progress lines of a request asked with `progress: true`."""

Serve = Callable[[dict[str, Any]], dict[str, Any]]
_PRCTL: list[Any] = []
"""libc's `prctl`, once the watchdog started (`_prctl`)."""


class _Lines:
    """Whole lines from a file descriptor read with `os.read` (so that `select` on it tells
    the truth: nothing is hidden in a buffer of Python's)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.pending, self.ended = fd, b"", False

    def fill(self) -> None:
        data = os.read(self.fd, 65536)
        if data:
            self.pending += data
        else:
            self.ended = True

    def take(self) -> list[bytes]:
        *lines, self.pending = self.pending.split(b"\n")
        return lines

    def line(self) -> bytes | None:
        """The next whole line (blocking); None at the end of the input."""
        while b"\n" not in self.pending:
            if self.ended:
                return None
            self.fill()
        line, self.pending = self.pending.split(b"\n", 1)
        return line


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def main(serve: Serve) -> None:
    """Answer requests, one JSON line each, until stdin ends (see the module docstring)."""
    # A write to a gateway that went away raises (EPIPE) instead of killing the watchdog
    # there and then: a progress line relayed at that moment must still stop the worker and
    # remove what it wrote (`_watch`), not leave it half-made under its hidden name.
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    _PRCTL.append(_prctl())
    requests = _Lines(0)
    while True:
        line = requests.line()
        if line is None:
            return
        if not line.strip():
            continue
        answer = supervise(json.loads(line), serve, requests)
        try:
            _write_all(json.dumps(answer).encode() + b"\n")
        except BrokenPipeError:
            return  # nobody reads the answer any more: the gateway went away
        if requests.ended:
            return


def supervise(request: dict[str, Any], serve: Serve, requests: _Lines) -> dict[str, Any]:
    """The answer to `request`, worked on by a forked worker with limits (see above)."""
    limits = {**DEFAULT_LIMITS, **dict(request.pop("limits", None) or {})}
    watch = bool(request.pop("watch", False))
    every = request.pop("progress", None)
    every = PROGRESS_EVERY if every is True else float(every) if every else None
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the worker
        code = 1
        try:
            os.close(read_end)
            _work(request, serve, limits, every, write_end, parent)
            code = 0
        except BaseException:
            traceback.print_exc()  # the agent's stderr: the gateway shows its tail
        finally:
            sys.stderr.flush()
            os._exit(code)
    os.close(write_end)
    try:
        return _watch(pid, request, limits, watch, read_end, requests)
    finally:
        os.close(read_end)


def _watch(
    pid: int,
    request: dict[str, Any],
    limits: dict[str, Any],
    watch: bool,
    read_end: int,
    requests: _Lines,
) -> dict[str, Any]:
    worker = _Lines(read_end)
    deadline = time.monotonic() + float(limits["wall"])
    answer: dict[str, Any] | None = None
    why: str | None = None  # "canceled" or "wall": the watchdog stopped the worker
    kill_at: float | None = None
    while not worker.ended:
        now = time.monotonic()
        if why is None and now >= deadline:
            why, kill_at = "wall", now
        if kill_at is not None and now >= kill_at:
            _kill(pid)
            kill_at = math.inf
        wake = min(
            deadline if why is None else math.inf, kill_at if kill_at is not None else math.inf
        )
        watched = [read_end] + ([0] if watch and why is None and not requests.ended else [])
        ready, _, _ = select.select(
            watched, [], [], None if wake == math.inf else max(0.0, wake - now)
        )
        if 0 in ready:
            requests.fill()
            heard = [line.strip() for line in requests.take()]
            if requests.ended or b"cancel" in heard:
                why, kill_at = "canceled", time.monotonic() + GRACE
                _signal(pid, signal.SIGUSR1)
        if read_end in ready:
            worker.fill()
            for line in worker.take():
                said = _json(line)
                if "ok" in said:
                    answer = said
                elif "progress" in said and why is None:
                    try:
                        _write_all(line + b"\n")
                    except BrokenPipeError:  # the gateway went away: as the end of input
                        why, kill_at = "canceled", time.monotonic() + GRACE
                        _signal(pid, signal.SIGUSR1)
    _, status, usage = os.wait4(pid, 0)
    if answer is not None and not (why == "wall" and answer.get("error") == "canceled"):
        return answer
    _clean(request)
    if why == "canceled":
        return _refused("canceled", "the task was canceled; what it wrote was removed", "")
    if why == "wall":
        return _refused(
            "limit",
            f"the {request.get('op')} took more than "
            f"{float(limits['wall']):g} s (the wall-clock limit of one file "
            "operation here); what it wrote was removed: ask for less at once "
            "(a smaller tree or file)",
            _field(request),
        )
    used = usage.ru_utime + usage.ru_stime
    if (
        os.WIFSIGNALED(status)
        and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL)
        and used >= float(limits["cpu"]) - 0.5
    ):
        return _cpu_refusal(request, float(limits["cpu"]))
    how = (
        f"was killed by signal {os.WTERMSIG(status)}"
        if os.WIFSIGNALED(status)
        else f"exited {os.WEXITSTATUS(status)}"
    )
    return _refused(
        "died",
        f"the file agent's worker {how} before it answered (was it "
        f"killed, or out of its {int(limits['memory']) // 2**20} MiB of memory?); "
        "what it wrote was removed",
        _field(request),
    )


def _json(line: bytes) -> dict[str, Any]:
    try:
        said = json.loads(line)
    except ValueError:
        return {}
    return said if isinstance(said, dict) else {}


def _signal(pid: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, number)


def _kill(pid: int) -> None:
    _signal(pid, signal.SIGKILL)


def _refused(kind: str, detail: str, field: str) -> dict[str, Any]:
    return {"ok": False, "error": kind, "detail": detail, "field": field}


def _field(request: dict[str, Any]) -> str:
    return "match_pattern" if request.get("match_pattern") else "path"


def _cpu_refusal(request: dict[str, Any], cpu: float) -> dict[str, Any]:
    if request.get("match_pattern"):
        detail = (
            f"match_pattern took more than {cpu:g} s of CPU time (the limit of one "
            "compress here); use a simpler pattern: one without nested repetition "
            "such as (a+)+ (Python regular expressions backtrack), or a smaller tree"
        )
    else:
        detail = (
            f"the {request.get('op')} took more than {cpu:g} s of CPU time (the limit "
            "of one such file operation here); ask for less at once (a smaller tree "
            "or file)"
        )
    return _refused("limit", detail, _field(request))


def _clean(request: dict[str, Any]) -> None:
    """Remove what a killed worker left half-made next to the request's target (its hidden
    `.iri-work-*` names: their writer is gone, so they are stale)."""
    if not isinstance(request.get("target"), dict):
        return
    writer = sys.modules.get("iri_gateway.service.files.remote.writer")
    archiver = sys.modules.get("iri_gateway.service.files.remote.archiver")
    if writer is None:
        return
    try:
        with writer.Place(request["target"], "target_path") as target:
            writer.remove_stale_work(target.fd, target.area)
    except Exception:
        pass
    if archiver is not None and request.get("op") == "extract":
        try:
            into = archiver.Into.open(request["target"])
        except Exception:
            into = None
        if into is not None:
            with into:
                writer.remove_stale_work(into.fd, into.area)


# ---- the worker ----------------------------------------------------------------------------


class Report:
    """The work's progress callback (`writer.reporter`): lines `{"progress": counts}` into
    the pipe at most every `every` seconds (none when not asked); after SIGUSR1 it raises
    the writer's `canceled` refusal, so the work removes what it wrote and answers."""

    def __init__(self, fd: int, every: float | None) -> None:
        self.fd, self.every, self.last, self.stopped = fd, every, 0.0, False
        signal.signal(signal.SIGUSR1, self._stop)

    def _stop(self, *_: object) -> None:
        self.stopped = True

    def __call__(self, counts: dict[str, Any]) -> None:
        if self.stopped:
            reader = sys.modules["iri_gateway.service.files.remote.reader"]
            raise reader.Refused("canceled", "the task was canceled; what it wrote was removed")
        now = time.monotonic()
        if self.every is not None and now - self.last >= self.every:
            self.last = now
            _send(self.fd, {"progress": counts})


def _send(fd: int, said: dict[str, Any]) -> None:
    view = memoryview(json.dumps(said).encode() + b"\n")
    while view:
        view = view[os.write(fd, view) :]


def _prctl() -> Any:
    """libc's `prctl`, looked up once by the watchdog (importing ctypes in every worker would
    cost milliseconds per request); None where there is none."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError, ImportError):
        return None


def _die_with(parent: int, prctl: Any) -> None:
    """Be killed when the watchdog dies (Linux's PR_SET_PDEATHSIG), so that a watchdog
    killed with -9 leaves no worker burning CPU."""
    if prctl is not None:
        prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def _limit(limits: dict[str, Any]) -> None:
    """The worker's own limits (never above what the account may have: a hard limit the
    system set lower is kept)."""
    cpu = max(1, math.ceil(float(limits["cpu"])))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _lower(resource.RLIMIT_CPU, cpu, cpu + 1)
    memory = int(limits["memory"])
    _lower(resource.RLIMIT_AS, memory, memory)


def _lower(which: int, soft: int, hard: int) -> None:
    _, allowed = resource.getrlimit(which)
    if allowed != resource.RLIM_INFINITY:
        soft, hard = min(soft, allowed), min(hard, allowed)
    resource.setrlimit(which, (soft, hard))


def _work(
    request: dict[str, Any],
    serve: Serve,
    limits: dict[str, Any],
    every: float | None,
    fd: int,
    parent: int,
) -> None:
    # Neither the gateway's input nor its output: the worker speaks only through `fd`, so
    # that nothing it does can put half a line into the stream the watchdog relays.
    quiet = os.open(os.devnull, os.O_RDWR)
    os.dup2(quiet, 0)
    os.dup2(quiet, 1)
    os.close(quiet)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a watchdog gone: die, say nothing
    _die_with(parent, _PRCTL[0] if _PRCTL else None)
    report = Report(fd, every)
    _limit(limits)
    request["_progress"] = report
    try:
        answer = serve(request)
    except MemoryError:
        answer = _refused(
            "limit",
            f"the {request.get('op')} needed more than "
            f"{int(limits['memory']) // 2**20} MiB of memory (the limit of one "
            "file operation here); ask for less at once",
            _field(request),
        )
    _send(fd, answer)
