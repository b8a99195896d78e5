"""STAND-IN for paramiko and a login node's sshd (not the real network): the SSH transport's
pool of connections is tested against it (tests/transport/test_ssh_pool.py and
test_transports.py).

`StandinServer` plays an sshd that allows `max_sessions` sessions per connection and refuses
more with paramiko's ChannelException, as OpenSSH does with "no more sessions"; its commands
are scripted (`ok`, `block` until released, `lose` the exit status, `die` with the
connection, `raw OUT ERR` prints the bytes given in hex). `PoolOnStandin` is the real
`SshTransport` connected to it. The real sshd is exercised by tests/integration/.
"""

from __future__ import annotations

import io
import threading
from dataclasses import dataclass, field
from typing import Any

import paramiko

from iri_gateway.transport.ssh import SshTransport


@dataclass
class StandinServer:
    """A login node's sshd as the transport sees it: sessions per connection are limited."""

    max_sessions: int = 10
    release: threading.Event = field(default_factory=threading.Event)
    refusals: int = 0
    most_sessions: int = 0
    connections: list[StandinConnection] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    lose_first: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def connect(self) -> StandinClient:
        connection = StandinConnection(self)
        with self.lock:
            self.connections.append(connection)
        return StandinClient(connection)


class StandinConnection:
    """One connection: its open sessions, whether it is alive, whether it was closed."""

    def __init__(self, server: StandinServer) -> None:
        self.server = server
        self.sessions = 0
        self.active = True
        self.closed_while_busy = False
        self.closed = False
        self.channels: list[StandinChannel] = []

    def is_active(self) -> bool:
        return self.active

    def open_session(self, timeout: float | None = None) -> StandinChannel:
        server = self.server
        with server.lock:
            if not self.active:
                raise EOFError("connection closed")
            if self.sessions >= server.max_sessions:
                server.refusals += 1
                raise paramiko.ChannelException(1, "Administratively prohibited")
            self.sessions += 1
            server.most_sessions = max(server.most_sessions, self.sessions)
            channel = StandinChannel(self)
            self.channels.append(channel)
            return channel

    def kill(self) -> None:
        """The network drops: every channel ends without an exit status."""
        with self.server.lock:
            self.active = False
            channels = list(self.channels)
        for channel in channels:
            channel.ended.set()
            channel.status_event.set()


class StandinChannel:
    """One session: runs the scripted command when asked to."""

    def __init__(self, connection: StandinConnection) -> None:
        self.connection = connection
        self.status_event = threading.Event()
        self.ended = threading.Event()
        self.exit_status = -1
        self.stdout = b""
        self.stderr = b""
        self.open = True

    def settimeout(self, timeout: float) -> None:
        pass

    def exec_command(self, command: str) -> None:
        command = command.removesuffix(" </dev/null")  # the shell's redirection, not a word
        server = self.connection.server
        with server.lock:
            server.ran.append(command)
            lose = command in server.lose_first
            server.lose_first.discard(command)
        words = command.split()
        if words[0] == "block":
            while not (server.release.wait(0.01) or self.ended.is_set()):
                pass
        if words[0] == "die":
            self.connection.kill()
        if self.ended.is_set() or lose or words[0] == "lose":
            self.status_event.set()  # closed without an exit status
            return
        if words[0] == "raw":
            self.stdout, self.stderr = bytes.fromhex(words[1]), bytes.fromhex(words[2])
        else:
            self.stdout = (command + "\n").encode()
        self.exit_status = 0
        self.status_event.set()

    def sendall(self, data: bytes) -> None:
        pass

    def shutdown_write(self) -> None:
        pass

    def makefile(self, mode: str) -> io.BytesIO:
        return io.BytesIO(self.stdout)

    def makefile_stderr(self, mode: str) -> io.BytesIO:
        return io.BytesIO(self.stderr)

    def close(self) -> None:
        with self.connection.server.lock:
            if self.open:
                self.open = False
                self.connection.sessions -= 1


class StandinClient:
    """What the transport uses of paramiko.SSHClient."""

    def __init__(self, connection: StandinConnection) -> None:
        self.connection = connection

    def get_transport(self) -> StandinConnection:
        return self.connection

    def close(self) -> None:
        with self.connection.server.lock:
            if self.connection.sessions and self.connection.active:
                self.connection.closed_while_busy = True
            self.connection.active = False
            self.connection.closed = True


class PoolOnStandin(SshTransport):
    """The real SshTransport, connecting to the stand-in instead of the network."""

    def __init__(self, server: StandinServer, **settings: Any) -> None:
        super().__init__(
            host="login",
            port=22,
            username="alice",
            known_hosts="/dev/null",
            backoff=0.01,
            **settings,
        )
        self.server = server

    def _connect(self) -> Any:
        return self.server.connect(), float("inf")  # a key, not a certificate: no end
