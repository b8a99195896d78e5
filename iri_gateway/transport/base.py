"""The thin seam between scheduler adapters and where commands run.

A transport runs an argv (optionally feeding stdin) and returns what came back, or starts one
with its input and output as byte streams (`stream`: the file agent's progress, cancel and
transfers need them; optional, declared in `offers` with whether commands run here as the
gateway's own account); it knows nothing about schedulers. Local runs a subprocess; SSH runs
the same argv on a login node; `scripted.ScriptedTransport` answers from a script, for
tests. Whatever runs the command, its output becomes text in one place, `decode_output`, so
every transport gives the same text for the same bytes.
"""

from __future__ import annotations

import shlex
import socket
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from iri_gateway.errors import GatewayError


def decode_output(data: bytes) -> str:
    """A command's output as text, the same for every transport: UTF-8, leniently (bytes that
    are not UTF-8 become U+FFFD), so a stray byte in a scheduler's or a job's words never
    fails the command that printed it; line endings are left as they came."""
    return data.decode("utf-8", "replace")


@dataclass(frozen=True)
class CommandResult:
    """What a command did: its argv, exit code and both output streams."""

    argv: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def describe(self) -> str:
        """One line for error messages: the command and the tail of its stderr."""
        err = self.stderr.strip().splitlines()[-1] if self.stderr.strip() else ""
        return f"`{shlex.join(self.argv)}` exited {self.exit_code}" + (f": {err}" if err else "")


class TransportError(GatewayError):
    """The command could not be run, or its result was lost (connection lost, program
    missing, time-out). Unless a subclass says otherwise, the command may or may not have
    run: a caller that changes things (a submission) must find out before trying again.

    `retry_after` is the pause, in seconds, suggested to clients: the fault is on the way to
    the scheduler, not in the request.
    """

    code = "transport_error"
    retry_after = 5


class NotSentError(TransportError):
    """The command surely never started: no connection could be opened, the login node
    refused the session, or no session became free in time. Safe to send again."""

    code = "transport_not_sent"


class OutcomeUnknownError(TransportError):
    """The command was sent, but its result never came back (the connection or channel
    closed before an exit status arrived, or it timed out): it may or may not have run."""

    code = "transport_outcome_unknown"


@dataclass(frozen=True)
class Offers:
    """What a transport offers beyond running a command, declared by the transport itself, so
    that its users ask what it offers instead of which class it is (a new transport says what
    it can do; nothing outside `transport/` tests for a concrete one)."""

    streams: bool = False
    """`stream` works: a command's input and output as byte streams while it runs (the file
    agents' progress and cancel, warm agents, uploads and downloads need it). Without it,
    `stream` raises NotSentError and those features answer that error."""
    tunnels: bool = False
    """`tunnel` works: a TCP connection opened from where commands run (this machine, or the
    login node) to a host and port there (the port proxy reaches a job's ports with it)."""
    as_gateway: bool = False
    """Commands run on this machine as the gateway's own account: the account's home and
    relative paths are this process's, and a command is cheap to start and keep running
    (the file agents keep a few started: `AgentLimits.warm`)."""


class TunnelsNotOfferedError(NotSentError):
    """A tunnel was asked of a transport that offers none (`Offers.tunnels`)."""

    code = "transport_no_tunnels"


class StreamsNotOfferedError(NotSentError):
    """A stream was asked of a transport that does not offer them (`Offers.streams`)."""

    code = "transport_no_streams"


class TunnelRefusedError(NotSentError):
    """The host and port a tunnel was asked for refused it, could not be reached, or may not
    be reached from there (the login node's sshd forbids forwarding): its words kept."""

    code = "transport_tunnel_refused"


def streaming(transport: Transport, what: str) -> Transport:
    """`transport`, which must offer streams for `what` (StreamsNotOfferedError otherwise,
    naming the transport and what needed them)."""
    if not transport.offers.streams:
        raise StreamsNotOfferedError(
            f"{what} needs a transport that streams; {transport.name!r} offers none"
        )
    return transport


class Stream(Protocol):
    """One running command's input and output as byte streams (`Transport.stream`); each
    call waits at most the stream's time-out (TransportError then)."""

    def send(self, data: bytes) -> None:
        """Write `data` to the command's input (blocks while it is not reading)."""

    def end_input(self) -> None:
        """Tell the command its input is complete."""

    def read(self, size: int) -> bytes:
        """Up to `size` bytes of output; b"" at its end."""

    def readline(self, limit: int = 65536) -> bytes:
        """One line of output with its newline (without one: the output ended, or `limit`
        bytes came without a newline)."""

    def stderr(self) -> str:
        """What the command wrote to its standard error so far (its tail)."""


class Transport(Protocol):
    """Runs commands where the scheduler lives."""

    name: str
    offers: Offers
    """What it offers beyond `run` and `make_directory` (`Offers`)."""
    python: str
    """The Python interpreter the gateway's own programs (the file agent) run with there:
    locally the gateway's own (`sys.executable`), on a login node `python3`."""

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float = 60.0,
        idempotent: bool = False,
    ) -> CommandResult:
        """Run `argv`; raise TransportError only when it could not be run or timed out.

        `idempotent` lets a transport retry a command that may already have run. A command
        that surely never started raises NotSentError; one whose result was lost after it
        was sent raises OutcomeUnknownError (never a made-up exit code).
        """

    def stream(
        self, argv: Sequence[str], *, timeout: float = 120.0
    ) -> AbstractContextManager[Stream]:
        """`argv` started, its input and output streamed until the block ends, when the
        command is ended (it sees the end of its input first; one still running is then
        killed). Never sent twice: a stream is not retried once it started. Only where
        `offers.streams` (ask with `streaming`)."""

    def tunnel(self, host: str, port: int, *, timeout: float) -> socket.socket:
        """A connected stream socket carrying a TCP connection opened from where commands run
        to `host`:`port` (the caller owns it and closes it; closing it closes the connection).
        TunnelRefusedError when the target refuses or cannot be reached, NotSentError when the
        transport cannot open one at all (`offers.tunnels` False); `timeout` bounds opening it.
        """

    def make_directory(self, path: str) -> None:
        """Create `path` and its parents (like `mkdir -p`); TransportError if impossible."""

    def usage(self) -> tuple[int, int] | None:
        """Its open connections and the sessions in use on them, for the metrics; None for
        a transport that keeps no connections (it runs commands here)."""

    def close(self) -> None:
        """Release connections; the transport may be used again afterwards."""
