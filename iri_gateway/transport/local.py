"""Run commands on this machine, as this process's user or (with `runuser`) as another."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

from iri_gateway.transport.base import CommandResult, TransportError, decode_output


class LocalTransport:
    """Subprocesses on the gateway host; `as_user` runs them through `runuser -u USER --`."""

    name = "local"

    def __init__(self, as_user: str | None = None, env: dict[str, str] | None = None) -> None:
        self._prefix = ["runuser", "-u", as_user, "--"] if as_user else []
        self._env = env

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float = 60.0,
        idempotent: bool = False,
    ) -> CommandResult:
        full = [*self._prefix, *argv]
        try:
            done = subprocess.run(
                full, input=None if stdin is None else stdin.encode(), capture_output=True,
                timeout=timeout, env=self._env, check=False,
            )
        except FileNotFoundError as error:
            raise TransportError(f"cannot run {argv[0]!r}: not found on this machine") from error
        except subprocess.TimeoutExpired as error:
            raise TransportError(f"`{' '.join(argv)}` timed out after {timeout:g} s") from error
        return CommandResult(tuple(argv), done.returncode, decode_output(done.stdout),
                             decode_output(done.stderr))

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

    def close(self) -> None:
        """Nothing to release."""
