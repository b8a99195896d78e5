"""Run commands on this machine, as this process's user or (with `runuser`) as another."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from typing import IO

from iri_gateway.transport.base import (
    CommandResult,
    NotSentError,
    Offers,
    OutcomeUnknownError,
    TransportError,
    TunnelRefusedError,
    decode_output,
)

_STOP_WAIT = 1.0
"""Seconds a streamed command has to exit once its input ended, before it is killed."""


class LocalTransport:
    """Subprocesses on the gateway host; `as_user` runs them through `runuser -u USER --`."""

    name = "local"
    python = sys.executable
    """The gateway's own interpreter: the file agent needs nothing else installed."""

    def __init__(self, as_user: str | None = None, env: dict[str, str] | None = None) -> None:
        self._prefix = ["runuser", "-u", as_user, "--"] if as_user else []
        self._env = env
        self.offers = Offers(streams=True, tunnels=True, as_gateway=as_user is None)
        """Streams and tunnels always; the gateway's own account unless it runs as `as_user`."""

    def tunnel(self, host: str, port: int, *, timeout: float) -> socket.socket:
        """A TCP connection from this machine (as the gateway's own process: a connection
        needs no account)."""
        try:
            connection = socket.create_connection((host, port), timeout=timeout)
        except OSError as error:
            raise TunnelRefusedError(
                f"cannot connect to {host}:{port} from this machine: {error.strerror or error}"
            ) from None
        connection.settimeout(None)
        return connection

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float = 60.0,
        idempotent: bool = False,
    ) -> CommandResult:
        """`argv` run to its end, in a session of its own (its input: `stdin`, else none).
        Past `timeout` the whole session is killed, not only the command: what it started
        (a shell's children; the command `runuser` runs as another account) would otherwise
        live on holding the output pipes, and the wait for them would never end."""
        full = [*self._prefix, *argv]
        try:
            process = subprocess.Popen(
                full,
                stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self._env,
                start_new_session=True,
            )
        except FileNotFoundError as error:
            raise TransportError(f"cannot run {argv[0]!r}: not found on this machine") from error
        try:
            out, err = process.communicate(
                None if stdin is None else stdin.encode(), timeout=timeout
            )
        except subprocess.TimeoutExpired:
            _kill_session(process)
            raise TransportError(f"`{' '.join(argv)}` timed out after {timeout:g} s") from None
        return CommandResult(
            tuple(argv), process.returncode, decode_output(out), decode_output(err)
        )

    @contextlib.contextmanager
    def stream(self, argv: Sequence[str], *, timeout: float = 120.0) -> Iterator[LocalStream]:
        """`argv` started in a session of its own with pipes for its input and output
        (`LocalStream`); when the block ends its input is closed, and the command (with
        whatever it started) is killed if it has not exited `_STOP_WAIT` seconds later."""
        errors = tempfile.TemporaryFile()  # noqa: SIM115 - closed when the stream ends
        try:
            process = subprocess.Popen(
                [*self._prefix, *argv],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
                env=self._env,
                start_new_session=True,
            )
        except OSError as error:
            errors.close()
            raise NotSentError(
                f"cannot run {argv[0]!r} on this machine: {error.strerror or error}"
            ) from None
        try:
            yield LocalStream(process, errors, timeout, argv[0])
        finally:
            _stop(process)
            errors.close()

    def make_directory(self, path: str) -> None:
        """In-process when running as ourselves (no fork on the submission path)."""
        if self._prefix:
            result = self.run(["mkdir", "-p", "--", path])
            if not result.ok:
                raise TransportError(f"cannot create {path}: {result.describe()}")
            return
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as error:
            raise TransportError(f"cannot create {path}: {error.strerror}") from None

    def usage(self) -> None:
        """No connections: commands run on this machine."""

    def close(self) -> None:
        """Nothing to release."""


def _kill_session(process: subprocess.Popen[bytes]) -> None:
    """Kill `process` and its session, then close its pipes (a process that left the
    session may still hold them: it is not waited for)."""
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.communicate(timeout=_STOP_WAIT)
    for pipe in (process.stdin, process.stdout, process.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    process.wait()


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Close `process`'s input, give it `_STOP_WAIT` s to exit, then kill its session."""
    with contextlib.suppress(OSError):
        if process.stdin is not None:
            process.stdin.close()
    try:
        process.wait(timeout=_STOP_WAIT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    if process.stdout is not None:
        process.stdout.close()


class LocalStream:
    """A local command's input and output as byte streams (the `Stream` of
    `transport.base`), read and written through the raw pipes with `select`, so that every
    wait is bounded by the stream's time-out. Its standard error goes to a file (its tail
    is kept for messages)."""

    def __init__(
        self, process: subprocess.Popen[bytes], errors: IO[bytes], timeout: float, program: str
    ) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self._in, self._out = process.stdin.fileno(), process.stdout.fileno()
        os.set_blocking(self._in, False)
        self._errors, self._timeout, self._program = errors, timeout, program
        self._pending = bytearray()

    def _wait(self, fd: int, writing: bool) -> None:
        ready = select.select([] if writing else [fd], [fd] if writing else [], [], self._timeout)
        if not any(ready):
            raise OutcomeUnknownError(
                f"`{self._program}` on this machine did not "
                f"{'read' if writing else 'answer'} within "
                f"{self._timeout:g} s"
            )

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            self._wait(self._in, writing=True)
            try:
                view = view[os.write(self._in, view) :]
            except BlockingIOError:
                continue
            except OSError as error:
                raise OutcomeUnknownError(
                    f"`{self._program}` on this machine stopped reading: {error.strerror or error}"
                ) from None

    def end_input(self) -> None:
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()

    def _fill(self) -> bool:
        self._wait(self._out, writing=False)
        data = os.read(self._out, 65536)
        self._pending += data
        return bool(data)

    def read(self, size: int) -> bytes:
        if not self._pending:
            self._fill()
        data = bytes(self._pending[:size])
        del self._pending[:size]
        return data

    def readline(self, limit: int = 65536) -> bytes:
        while b"\n" not in self._pending and len(self._pending) < limit:
            if not self._fill():
                break
        end = self._pending.find(b"\n")
        end = len(self._pending) if end < 0 else end + 1
        line = bytes(self._pending[:end])
        del self._pending[:end]
        return line

    def stderr(self) -> str:
        """The last 64 KiB the command wrote to its standard error."""
        try:
            size = os.fstat(self._errors.fileno()).st_size
            return decode_output(os.pread(self._errors.fileno(), 65536, max(0, size - 65536)))
        except OSError:
            return ""
