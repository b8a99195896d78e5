"""Run commands on a login node over SSH (paramiko), one reused connection per account.

Host keys are pinned: the login node's key must be in the given known_hosts file, and an
unknown or changed key is refused (RejectPolicy), never accepted on first use. Authentication
is by key only. A dropped connection is re-opened with exponential backoff — but a command
that may already have run (the connection broke after it was sent) is retried only when the
caller says it is idempotent, so a submission is never sent twice by the transport.
"""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Sequence

import paramiko

from iri_gateway.transport.base import CommandResult, TransportError


class HostKeyError(TransportError):
    """The login node's host key is unknown or differs from the pinned one."""

    code = "host_key_rejected"


class SshTransport:
    """Commands on `user@host:port`; thread-safe, one connection shared by all calls."""

    name = "ssh"

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
    ) -> None:
        self.host, self.port, self.username = host, port, username
        self._known_hosts = known_hosts
        self._key_file = key_file
        self._connect_timeout = connect_timeout
        self._attempts = attempts
        self._backoff = backoff
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.Lock()

    def _connect(self) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        try:
            client.load_host_keys(self._known_hosts)
        except OSError as error:
            raise TransportError(f"cannot read known_hosts {self._known_hosts}: {error}") from None
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(
                self.host, port=self.port, username=self.username,
                key_filename=self._key_file, timeout=self._connect_timeout,
                banner_timeout=self._connect_timeout, auth_timeout=self._connect_timeout,
                allow_agent=False, look_for_keys=self._key_file is None,
            )
        except paramiko.BadHostKeyException as error:
            client.close()
            raise HostKeyError(
                f"host key of {self.host}:{self.port} does not match {self._known_hosts}: "
                f"{error}"
            ) from None
        except paramiko.SSHException as error:
            client.close()
            if "not found in known_hosts" in str(error):
                raise HostKeyError(
                    f"{self.host}:{self.port} is not in {self._known_hosts}; pin its key first"
                ) from None
            raise
        return client

    def _session(self) -> paramiko.SSHClient:
        with self._lock:
            client = self._client
            transport = client.get_transport() if client else None
            if client is None or transport is None or not transport.is_active():
                if client is not None:
                    client.close()
                self._client = self._connect()
            assert self._client is not None
            return self._client

    def _drop(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

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
        for attempt in range(1, self._attempts + 1):
            sent = False
            try:
                client = self._session()
                channel_in, channel_out, channel_err = client.exec_command(
                    command, timeout=timeout
                )
                sent = True
                if stdin is not None:
                    channel_in.write(stdin)
                channel_in.channel.shutdown_write()
                stdout = channel_out.read().decode("utf-8", "replace")
                stderr = channel_err.read().decode("utf-8", "replace")
                code = channel_out.channel.recv_exit_status()
                return CommandResult(tuple(argv), code, stdout, stderr)
            except HostKeyError:
                raise
            except paramiko.AuthenticationException as error:
                raise TransportError(
                    f"SSH authentication as {self.username}@{self.host} failed: {error}"
                ) from None
            except (TimeoutError, paramiko.SSHException, EOFError, OSError) as error:
                self._drop()
                if sent and not idempotent:
                    raise TransportError(
                        f"connection to {self.host} lost while running `{command}`; it may "
                        f"or may not have run ({error})"
                    ) from None
                if attempt == self._attempts:
                    raise TransportError(
                        f"cannot reach {self.username}@{self.host}:{self.port} after "
                        f"{attempt} attempts: {error}"
                    ) from None
                time.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    def make_directory(self, path: str) -> None:
        result = self.run(["mkdir", "-p", "--", path], idempotent=True)
        if not result.ok:
            raise TransportError(f"cannot create {path}: {result.describe()}")

    def close(self) -> None:
        self._drop()
