"""Start a real `iri-gateway serve` process on a data directory of the test's choosing.

The session-wide `server` fixture (tests/conftest.py) serves most tests; this is for the ones
that need their own: a first start on an empty data directory, or a store filled beforehand.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.conftest import clean_env, free_port


@dataclass(frozen=True)
class RunningServe:
    """A running server: its base URL, its process and the file its output goes to."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def serve_process(
    argv: list[str], log: Path, env: dict[str, str], cwd: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """ARGV started (in CWD, if given) with its output (stdout and stderr) in LOG, ended when
    the block ends: terminated, killed if it does not stop within 15 s."""
    with log.open("wb") as stream:
        process = subprocess.Popen(argv, stdout=stream, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


@contextmanager
def running_serve(
    data_dir: Path,
    *,
    extra_env: dict[str, str] | None = None,
    timeout: float = 60,
    args: tuple[str, ...] = (),
) -> Iterator[RunningServe]:
    """`iri-gateway serve --data-dir DATA_DIR [ARGS]` on a free loopback port until the block
    ends."""
    data_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = data_dir.parent / f"{data_dir.name}-serve.log"
    argv = [
        sys.executable,
        "-m",
        "iri_gateway",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
        *args,
    ]
    with serve_process(argv, log, {**clean_env(), **(extra_env or {})}) as process:
        served = RunningServe(f"http://127.0.0.1:{port}", process, log)
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise AssertionError(f"serve exited: {served.output()}")
            try:
                httpx.get(f"{served.url}/api/v2/facility", timeout=2)
                break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"serve did not answer within {timeout} s")
            time.sleep(0.1)
        yield served
