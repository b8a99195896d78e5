"""Run commands on a login node over SSH (paramiko), through a small pool of connections.

Host keys are pinned: the login node's key must be in the given known_hosts file, and an
unknown or changed key is refused (RejectPolicy), never accepted on first use. Authentication
is by key only: a key file, or a short-lived certificate made per account (`Credentials`,
`ssh_certificates`); a connection is not given commands past its certificate's end.

Each command is one SSH session (channel). sshd allows a bounded number of sessions per
connection (OpenSSH `MaxSessions`, 10 by default) and refuses more ("no more sessions" in its
log, "administratively prohibited" to the client), so concurrent commands are spread over
several connections, opened as needed, each carrying at most `max_sessions` commands at once
— below the server's limit — and at most `max_connections` of them; a command that finds
every session taken waits for one to free.

What happens when things go wrong depends on whether the command was sent:

- A refused session means the command was not sent. It is tried again on another (or a
  new) connection, and the refusing connection stays open: other commands are using it.
- A connection that cannot be opened, or turns out dead before the command was sent, is
  retried with exponential backoff; after the last attempt, NotSentError.
- Once sent, a lost connection, a time-out, or a channel that closes without an exit status
  leaves the outcome unknown: an idempotent command (a status query) is sent again, any
  other raises OutcomeUnknownError — never a made-up exit code — so a submission is never
  sent twice by the transport; the engine finds it by its tag instead.

Only a connection that is really dead (its transport no longer active) is dropped; a
command's failure never closes a connection under the commands still running on it.
"""

from __future__ import annotations

import shlex
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

import paramiko

from iri_gateway.tracing import traced_run, traced_stream
from iri_gateway.transport.base import (
    CommandResult,
    NotSentError,
    Offers,
    OutcomeUnknownError,
    TransportError,
    TunnelRefusedError,
    decode_output,
)
from iri_gateway.transport.ssh_rekey import RekeySafeTransport
from iri_gateway.transport.ssh_tunnel import bridged

RETIRE_BEFORE_END = 2.0
"""Seconds before its certificate ends that a connection takes no more commands (the ones
it carries finish on it; sshd checks a certificate only when a connection logs in)."""

_REFUSAL_LOST = "Unable to open channel."
"""What paramiko says of a refused session when another thread's refusal took its reason:
it keeps one refusal per connection, and each opener takes it (and clears it) when it wakes,
so of two refused at once one gets this instead of its ChannelException."""

REFUSAL_PAUSE = 0.5
"""Seconds a connection that refused a session is not offered another one: sshd frees a
session slot only once it has processed the end of an earlier session."""


class HostKeyError(NotSentError):
    """The login node's host key is unknown or differs from the pinned one."""

    code = "host_key_rejected"


@dataclass(eq=False)
class _Connection:
    """One SSH connection of the pool and the sessions it carries now."""

    client: paramiko.SSHClient
    busy: int = 0
    refused_at: float = float("-inf")
    ends_at: float = float("inf")
    """When the certificate it logged in with ends (POSIX time; none: never)."""

    def alive(self) -> bool:
        transport = self.client.get_transport()
        return transport is not None and transport.is_active()


class Credentials(Protocol):
    """What a connection logs in with when it is not a key file: a key carrying a
    certificate and the POSIX time the certificate ends (`ssh_certificates`)."""

    def key(self) -> tuple[paramiko.PKey, float]: ...


class _Refused(Exception):
    """The server refused to open a session on a connection (not sent)."""


class _Lost(Exception):
    """The connection failed; `sent` says whether the command may have started."""

    def __init__(self, error: BaseException, *, sent: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.sent = sent


class SshTransport:
    """Commands on `user@host:port`; thread-safe, a pool of connections shared by all calls."""

    name = "ssh"
    offers = Offers(streams=True, tunnels=True, as_gateway=False)
    """Streams and tunnels (a channel each); never the gateway's own account nor this
    machine."""
    python = "python3"
    """The login node's interpreter the file agent runs with."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        username: str,
        known_hosts: str,
        key_file: str | None = None,
        connect_timeout: float = 10.0,
        attempts: int = 4,
        backoff: float = 0.25,
        max_sessions: int = 8,
        max_connections: int = 4,
        credentials: Credentials | None = None,
    ) -> None:
        if max_sessions < 1 or max_connections < 1:
            raise ValueError("max_sessions and max_connections must be at least 1")
        self.host, self.port, self.username = host, port, username
        self._known_hosts = known_hosts
        self._key_file = key_file
        self._credentials = credentials
        self._connect_timeout = connect_timeout
        self._attempts = attempts
        self._backoff = backoff
        self.max_sessions = max_sessions
        self.max_connections = max_connections
        self._pool: list[_Connection] = []
        self._opening = False
        self._changed = threading.Condition()

    # ---- connections -------------------------------------------------------------------------

    def _connect(self) -> tuple[paramiko.SSHClient, float]:
        """A new authenticated connection and when its certificate ends (never, with a key
        file); NotSentError when none can be had."""
        pkey: paramiko.PKey | None = None
        ends_at = float("inf")
        if self._credentials is not None:
            pkey, ends_at = self._credentials.key()
        client = paramiko.SSHClient()
        try:
            client.load_host_keys(self._known_hosts)
        except OSError as error:
            raise NotSentError(f"cannot read known_hosts {self._known_hosts}: {error}") from None
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(
                self.host,
                port=self.port,
                username=self.username,
                key_filename=self._key_file,
                pkey=pkey,
                timeout=self._connect_timeout,
                banner_timeout=self._connect_timeout,
                auth_timeout=self._connect_timeout,
                allow_agent=False,
                look_for_keys=self._key_file is None and pkey is None,
                transport_factory=RekeySafeTransport,
            )
        except paramiko.BadHostKeyException as error:
            client.close()
            raise HostKeyError(
                f"host key of {self.host}:{self.port} does not match {self._known_hosts}: {error}"
            ) from None
        except paramiko.AuthenticationException as error:
            client.close()
            raise NotSentError(
                f"SSH authentication as {self.username}@{self.host} failed: {error}"
            ) from None
        except paramiko.SSHException as error:
            client.close()
            if "not found in known_hosts" in str(error):
                raise HostKeyError(
                    f"{self.host}:{self.port} is not in {self._known_hosts}; pin its key first"
                ) from None
            raise
        except BaseException:
            client.close()
            raise
        return client, ends_at

    def _lease(self, deadline: float) -> _Connection:
        """A connection with a free session, reserved for one command (release it after).

        Reuses an open connection with room, else opens one (one at a time, so a burst of
        commands does not open a burst of connections), else waits for a session to free up
        until `deadline` (NotSentError then).
        """
        with self._changed:
            while True:
                self._forget_dead()
                now = time.monotonic()
                for connection in self._pool:
                    if (
                        connection.busy < self.max_sessions
                        and now - connection.refused_at >= REFUSAL_PAUSE
                    ):
                        connection.busy += 1
                        return connection
                if not self._opening and len(self._pool) < self.max_connections:
                    self._opening = True
                    break
                left = deadline - now
                if left <= 0:
                    raise NotSentError(
                        f"no SSH session to {self.username}@{self.host}:{self.port} became "
                        f"free in time ({len(self._pool)} connections of at most "
                        f"{self.max_connections}, {self.max_sessions} sessions each); "
                        "the command was not sent"
                    )
                self._changed.wait(min(left, REFUSAL_PAUSE))
        try:
            client, ends_at = self._connect()
        except BaseException:
            with self._changed:
                self._opening = False
                self._changed.notify_all()
            raise
        connection = _Connection(client, busy=1, ends_at=ends_at)
        with self._changed:
            self._opening = False
            self._pool.append(connection)
            self._changed.notify_all()
        return connection

    def _release(self, connection: _Connection) -> None:
        with self._changed:
            connection.busy -= 1
            if connection not in self._pool and connection.busy == 0:
                connection.client.close()
            self._changed.notify_all()

    def _refused(self, connection: _Connection) -> None:
        """The server refused a session: offer this connection no other one for a moment."""
        with self._changed:
            connection.refused_at = time.monotonic()

    def _forget_dead(self) -> None:
        """Drop connections whose transport is no longer active, and retire those whose
        certificate is about to end (caller holds the lock).

        A dead connection still carrying commands is closed by the last of them to finish;
        they fail on their own, since the connection under them is gone already. A retired
        one carries its commands to their end, then is closed the same way.
        """
        ending = time.time() + RETIRE_BEFORE_END
        for connection in [c for c in self._pool if not c.alive() or c.ends_at <= ending]:
            self._pool.remove(connection)
            if connection.busy == 0:
                connection.client.close()

    def usage(self) -> tuple[int, int]:
        """Open connections, and sessions in use on them (for the metrics)."""
        with self._changed:
            return len(self._pool), sum(connection.busy for connection in self._pool)

    def connections(self) -> list[paramiko.SSHClient]:
        """The open connections (for diagnostics and tests)."""
        with self._changed:
            return [connection.client for connection in self._pool]

    # ---- commands ----------------------------------------------------------------------------

    @traced_run("ssh")
    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float = 60.0,
        idempotent: bool = False,
    ) -> CommandResult:
        """Run `argv` on the login node (the remote shell sees it shell-quoted)."""
        command = shlex.join(argv)
        delay = self._backoff
        attempt = 0
        deadline = time.monotonic() + max(timeout, self._connect_timeout)
        while True:
            try:
                connection = self._lease(deadline)
            except (paramiko.SSHException, EOFError, OSError) as error:
                failure: _Lost = _Lost(error, sent=False)
            else:
                try:
                    stdout, stderr, code = self._exec(connection, command, stdin, timeout)
                except _Refused:
                    continue  # not sent: another connection, or this one in a moment
                except _Lost as lost:
                    failure = lost
                else:
                    if code >= 0:
                        return CommandResult(tuple(argv), code, stdout, stderr)
                    failure = _Lost(
                        EOFError("the channel closed without an exit status"), sent=True
                    )
                finally:
                    self._release(connection)
            attempt += 1
            if failure.sent and not idempotent:
                raise OutcomeUnknownError(
                    f"`{command}` was sent to {self.username}@{self.host}, but its outcome is "
                    f"unknown: it may or may not have run ({_describe(failure.error)})"
                ) from None
            if attempt >= self._attempts:
                kind = OutcomeUnknownError if failure.sent else NotSentError
                raise kind(
                    f"cannot run `{command}` on {self.username}@{self.host}:{self.port} after "
                    f"{attempt} attempts: {_describe(failure.error)}"
                ) from None
            time.sleep(delay)
            delay *= 2

    def _exec(
        self, connection: _Connection, command: str, stdin: str | None, timeout: float
    ) -> tuple[str, str, int]:
        """Stdout, stderr and exit status (-1 when none arrived) of one command.

        _Refused when the server would not open the session, _Lost when the connection
        failed (with whether the command may have started). A channel that fails on a live
        connection (a time-out) is closed; the connection stays.
        """
        channel = self._open(connection)
        try:
            channel.settimeout(timeout)
            if stdin is None:
                # Its input is /dev/null, not an EOF of ours: paramiko may send that EOF
                # after a quick command's channel is gone, and sshd then drops the whole
                # connection with every command on it ("ieof packet referred to nonexistent
                # channel", paramiko issue #1705). A command given input reads it to its
                # end, so cannot end before our EOF.
                channel.exec_command(f"{command} </dev/null")
            else:
                channel.exec_command(command)
                channel.sendall(stdin.encode())
                channel.shutdown_write()
            stdout = decode_output(channel.makefile("rb").read())
            stderr = decode_output(channel.makefile_stderr("rb").read())
            if not channel.status_event.wait(timeout):
                raise TimeoutError(f"no exit status within {timeout:g} s")
            return stdout, stderr, channel.exit_status
        except (TimeoutError, paramiko.SSHException, EOFError, OSError) as error:
            raise _Lost(error, sent=True) from None
        finally:
            channel.close()

    @traced_stream("ssh")
    @contextmanager
    def stream(self, argv: Sequence[str], *, timeout: float = 120.0) -> Iterator[CommandStream]:
        """`argv` started on the login node, its input and output streamed (`CommandStream`)
        until the block ends, when the channel is closed (the command sees the end of its
        input; a command still reading takes that for an abort).

        Opened like `run`'s sessions (a refused session is tried again; NotSentError when
        none can be had); never sent twice: a stream is not retried once it started.
        """
        command = shlex.join(argv)
        deadline = time.monotonic() + max(timeout, self._connect_timeout)
        while True:
            try:
                connection = self._lease(deadline)
            except (paramiko.SSHException, EOFError, OSError) as error:
                raise NotSentError(
                    f"cannot start `{argv[0]}` on {self.username}@{self.host}:"
                    f"{self.port}: {_describe(error)}"
                ) from None
            try:
                channel = self._open(connection)
            except _Refused:
                self._release(connection)
                continue
            except _Lost as lost:
                self._release(connection)
                raise NotSentError(
                    f"cannot start `{argv[0]}` on {self.username}@{self.host}:"
                    f"{self.port}: {_describe(lost.error)}"
                ) from None
            break
        try:
            channel.settimeout(timeout)
            try:
                channel.exec_command(command)
            except (paramiko.SSHException, EOFError, OSError) as error:
                raise OutcomeUnknownError(
                    f"`{argv[0]}` was sent to {self.host}, but the "
                    f"channel failed: {_describe(error)}"
                ) from None
            yield CommandStream(channel, f"{self.username}@{self.host}")
        finally:
            channel.close()
            self._release(connection)

    def tunnel(self, host: str, port: int, *, timeout: float) -> socket.socket:
        """A `direct-tcpip` channel from the login node to `host`:`port` (what `ssh -L` opens),
        as a socket (`ssh_tunnel`). The channel is opened on a pooled connection, which is
        leased only while it opens: a tunnel may stay open for hours (a notebook's
        WebSocket), and sshd's MaxSessions counts session channels, not forwarded ones, so
        it takes no command's session."""
        deadline = time.monotonic() + max(timeout, self._connect_timeout)
        try:
            connection = self._lease(deadline)
        except (paramiko.SSHException, EOFError, OSError) as error:
            raise NotSentError(
                f"cannot reach {self.username}@{self.host}:{self.port} to connect to "
                f"{host}:{port}: {_describe(error)}"
            ) from None
        try:
            transport = connection.client.get_transport()
            if transport is None or not transport.is_active():
                raise NotSentError(f"the connection to {self.host} closed; try again")
            channel = transport.open_channel(
                "direct-tcpip", (host, port), ("127.0.0.1", 0), timeout=timeout
            )
        except paramiko.ChannelException as error:
            raise TunnelRefusedError(
                f"{self.host} could not connect to {host}:{port}: {error.text or error}"
            ) from None
        except (paramiko.SSHException, EOFError, OSError) as error:
            raise NotSentError(
                f"cannot open a channel to {host}:{port} through {self.host}: {_describe(error)}"
            ) from None
        finally:
            self._release(connection)
        return bridged(channel, f"{host}:{port}")

    def _open(self, connection: _Connection) -> paramiko.Channel:
        """A new session on `connection`; _Refused or _Lost (not sent) otherwise."""
        transport = connection.client.get_transport()
        if transport is None or not transport.is_active():
            raise _Lost(EOFError("the connection is closed"), sent=False)
        try:
            return transport.open_session(timeout=self._connect_timeout)
        except paramiko.ChannelException as error:
            self._refused(connection)
            raise _Refused(str(error)) from None
        except paramiko.SSHException as error:
            if transport.is_active() and str(error) == _REFUSAL_LOST:
                self._refused(connection)
                raise _Refused(str(error)) from None
            raise _Lost(error, sent=False) from None
        except (EOFError, OSError) as error:
            raise _Lost(error, sent=False) from None

    def make_directory(self, path: str) -> None:
        result = self.run(["mkdir", "-p", "--", path], idempotent=True)
        if not result.ok:
            raise TransportError(f"cannot create {path}: {result.describe()}")

    def close(self) -> None:
        """Close every connection; the next command opens new ones."""
        with self._changed:
            pool, self._pool = self._pool, []
        for connection in pool:
            connection.client.close()


class CommandStream:
    """One running command's input and output as byte streams, with backpressure: `send`
    blocks while the channel's window is full (the command is not reading), `read` while
    nothing has arrived; each waits at most the stream's time-out (TransportError then).
    Its standard error is kept (the last 64 KiB) for messages."""

    def __init__(self, channel: paramiko.Channel, where: str) -> None:
        self._channel = channel
        self._where = where
        self._pending = bytearray()
        self._stderr = bytearray()

    def _failed(self, error: BaseException) -> TransportError:
        return OutcomeUnknownError(f"the stream to {self._where} failed: {_describe(error)}")

    def send(self, data: bytes) -> None:
        try:
            self._channel.sendall(data)
        except (TimeoutError, paramiko.SSHException, EOFError, OSError) as error:
            raise self._failed(error) from None

    def end_input(self) -> None:
        """Tell the command its input is complete."""
        try:
            self._channel.shutdown_write()
        except (paramiko.SSHException, EOFError, OSError) as error:
            raise self._failed(error) from None

    def read(self, size: int) -> bytes:
        """Up to `size` bytes of output; b"" at its end."""
        if self._pending:
            data = bytes(self._pending[:size])
            del self._pending[:size]
            return data
        try:
            data = self._channel.recv(size)
        except (TimeoutError, paramiko.SSHException, EOFError, OSError) as error:
            raise self._failed(error) from None
        self._drain_stderr()
        return data

    def readline(self, limit: int = 65536) -> bytes:
        """One line of output with its newline (without one: the output ended, or `limit`
        bytes came without a newline)."""
        while b"\n" not in self._pending and len(self._pending) < limit:
            try:
                data = self._channel.recv(65536)
            except (TimeoutError, paramiko.SSHException, EOFError, OSError) as error:
                raise self._failed(error) from None
            if not data:
                break
            self._pending += data
        end = self._pending.find(b"\n")
        end = len(self._pending) if end < 0 else end + 1
        line = bytes(self._pending[:end])
        del self._pending[:end]
        return line

    def _drain_stderr(self) -> None:
        while self._channel.recv_stderr_ready():
            self._stderr += self._channel.recv_stderr(65536)
            del self._stderr[:-65536]

    def stderr(self) -> str:
        """What the command wrote to its standard error so far (its last 64 KiB)."""
        self._drain_stderr()
        return decode_output(bytes(self._stderr))


def _describe(error: BaseException) -> str:
    return str(error) or type(error).__name__
