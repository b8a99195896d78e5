"""A transport that answers from a script, in memory: the test double of every transport,
shipped with the package as httpx ships its MockTransport.

    transport = ScriptedTransport()
    transport.on("squeue", reply=Answer(stdout="123|RUNNING|\n"))
    transport.on("sbatch", reply=OutcomeUnknownError("the answer was lost"), times=1)
    ...
    [call.argv for call in transport.calls]  # every command asked for, in order

A rule matches a command by its first words (`on("scontrol", "show", "job")`); the first
rule added that matches and is not used up answers. Its reply is an `Answer` (exit code and
both streams), an exception to raise (a TransportError plays an outage), or a function of
the `Call` returning a CommandResult (to wait for a gate, or to run the call on a real
transport and change what it answered). A command no rule answers goes to `otherwise`, a
real transport, so a test can watch or disturb some commands and let the rest run; without
one it raises UnscriptedCommandError, an AssertionError, which no gateway code mistakes for
a transport failure.
"""

from __future__ import annotations

import shlex
import socket
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from iri_gateway.transport.base import (
    CommandResult,
    Offers,
    Stream,
    Transport,
    TunnelsNotOfferedError,
)


@dataclass(frozen=True)
class Call:
    """One command as the transport was asked to run it."""

    argv: tuple[str, ...]
    stdin: str | None = None
    timeout: float = 60.0
    idempotent: bool = False

    def run_on(self, transport: Transport) -> CommandResult:
        """This call, run by `transport` exactly as it was asked."""
        return transport.run(
            self.argv, stdin=self.stdin, timeout=self.timeout, idempotent=self.idempotent
        )


@dataclass(frozen=True)
class Answer:
    """What a scripted command prints and how it exits."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0


Reply = Answer | BaseException | Callable[[Call], CommandResult]
"""An answer, an exception to raise, or a function that makes the result of a call."""


class UnscriptedCommandError(AssertionError):
    """A command that no rule answers, on a transport with nothing to pass it on to."""


@dataclass
class _Rule:
    prefix: tuple[str, ...]
    reply: Reply
    left: int | None  # answers still to give; None: any number

    def takes(self, argv: tuple[str, ...]) -> bool:
        return argv[: len(self.prefix)] == self.prefix and self.left != 0


class ScriptedTransport:
    """Answers commands from rules, records every call; thread-safe, like the real ones."""

    def __init__(self, *, otherwise: Transport | None = None, name: str | None = None) -> None:
        self.otherwise = otherwise
        self.name = name or (otherwise.name if otherwise is not None else "scripted")
        self.calls: list[Call] = []
        self.directories: list[str] = []
        self._rules: list[_Rule] = []
        self._lock = threading.Lock()

    def on(self, *prefix: str, reply: Reply, times: int | None = None) -> ScriptedTransport:
        """Answer commands whose argv starts with `prefix` by `reply`, `times` times (None:
        every time); returns the transport, so rules can be chained."""
        if times is not None and times < 1:
            raise ValueError("times must be at least 1 (or None: every time)")
        with self._lock:
            self._rules.append(_Rule(tuple(prefix), reply, times))
        return self

    def programs(self) -> list[str]:
        """The program of every call, in order (`["squeue", "squeue"]`)."""
        with self._lock:
            return [call.argv[0] for call in self.calls]

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float = 60.0,
        idempotent: bool = False,
    ) -> CommandResult:
        """The reply of the first rule that takes `argv`, else what `otherwise` answers."""
        call = Call(tuple(argv), stdin, timeout, idempotent)
        with self._lock:
            self.calls.append(call)
            rule = next((rule for rule in self._rules if rule.takes(call.argv)), None)
            if rule is not None and rule.left is not None:
                rule.left -= 1
        if rule is None:
            if self.otherwise is None:
                raise UnscriptedCommandError(f"no rule answers `{shlex.join(call.argv)}`")
            return call.run_on(self.otherwise)
        reply = rule.reply
        if isinstance(reply, Answer):
            return CommandResult(call.argv, reply.exit_code, reply.stdout, reply.stderr)
        if isinstance(reply, BaseException):
            raise reply
        return reply(call)

    @property
    def offers(self) -> Offers:
        """`otherwise`'s (a script alone offers no streams and runs nothing here)."""
        return self.otherwise.offers if self.otherwise is not None else Offers()

    @property
    def python(self) -> str:
        """`otherwise`'s interpreter (a login node's `python3` without one)."""
        return self.otherwise.python if self.otherwise is not None else "python3"

    def stream(
        self, argv: Sequence[str], *, timeout: float = 120.0
    ) -> AbstractContextManager[Stream]:
        """`otherwise`'s stream, recorded as a call; a script has no streams of its own."""
        with self._lock:
            self.calls.append(Call(tuple(argv), None, timeout, False))
        if self.otherwise is None:
            raise UnscriptedCommandError(f"no streams without `otherwise`: `{shlex.join(argv)}`")
        return self.otherwise.stream(argv, timeout=timeout)

    def tunnel(self, host: str, port: int, *, timeout: float) -> socket.socket:
        """`otherwise`'s tunnel; a script has none of its own."""
        if self.otherwise is None:
            raise TunnelsNotOfferedError(f"a script opens no tunnels (to {host}:{port})")
        return self.otherwise.tunnel(host, port, timeout=timeout)

    def make_directory(self, path: str) -> None:
        """Recorded in `directories`; made by `otherwise` when there is one."""
        with self._lock:
            self.directories.append(path)
        if self.otherwise is not None:
            self.otherwise.make_directory(path)

    def usage(self) -> None:
        """No connections of its own (a test's stand-in, not counted in the metrics)."""

    def close(self) -> None:
        """Closes `otherwise`, if any."""
        if self.otherwise is not None:
            self.otherwise.close()
