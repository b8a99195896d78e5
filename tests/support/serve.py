"""The one way tests start a real `iri-gateway serve`: environment, port, readiness, stop, logs.

Every test that talks HTTP to the gateway talks to this process (the suite's shared `server`
fixture in tests/conftest.py, the API tests that need a server of their own, the integration
tests' gateway on the test cluster, the conformance sandboxes), so what "started" and
"stopped" mean is decided here once: started when the server answers (the caller may ask
for more, e.g. a resource loaded), stopped with SIGTERM, then SIGKILL after `stop_timeout`.
A server that exits or never answers fails the test with its own output; a block that raises
prints the server's log to stderr, which pytest shows beside the failure.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

CLI = [sys.executable, "-m", "iri_gateway"]
"""The gateway's command line, run by the interpreter of the tests (no installed script)."""

LOG_TAIL = 20_000
"""How much of a server's log (its end) a failure shows."""

ISSUED_TOKENS: list[str] = []
"""Every token `issue_token` made in this test session: no server's output may contain one
(`tests/support/token_leaks.py` greps `kept_logs()` for them when the session ends)."""

_KEPT: list[Path] = []
_FOLDER: list[Path] = []
"""The session's folder of kept logs, made with the first one."""


def kept_logs() -> list[Path]:
    """A copy of the output of every process `serve_process` ran in this session, made when
    it stopped (a test's own folder may be gone by the end)."""
    return list(_KEPT)


def _keep(log: Path) -> None:
    if not log.exists():
        return
    if not _FOLDER:
        _FOLDER.append(Path(tempfile.mkdtemp(prefix="iri-gateway-serve-logs-")))
    copy = _FOLDER[0] / f"{len(_KEPT):04d}-{log.name}"
    shutil.copyfile(log, copy)
    _KEPT.append(copy)


def clean_env() -> dict[str, str]:
    """This process's environment without `IRI_GATEWAY_*`: a server's settings are the test's,
    never whatever the shell running pytest happens to export."""
    return {k: v for k, v in os.environ.items() if not k.startswith("IRI_GATEWAY_")}


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def issue_token(
    data_dir: Path,
    user: str,
    project: str,
    env: Mapping[str, str] | None = None,
    *,
    base_env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    options: Sequence[str] = (),
) -> str:
    """A token for `user` in `project`, made by `iri-gateway token` in DATA_DIR's tokens file;
    its environment is BASE_ENV (default: the clean one) with ENV added (another tokens file,
    say); `options`: more of the command's options (`--read-only`, say)."""
    environment = {**(dict(base_env) if base_env is not None else clean_env()), **(env or {})}
    made = subprocess.run(
        [*CLI, "token", user, f"--project={project}", "--data-dir", str(data_dir), *options],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment,
        cwd=cwd,
    )
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[-1]
    ISSUED_TOKENS.append(token)
    return token


@dataclass(frozen=True)
class RunningServe:
    """A running server: its base URL, its process and the file its output goes to."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def answers(url: str) -> bool:
    """The default readiness: the server answers HTTP at all (the facility needs no token)."""
    try:
        httpx.get(f"{url}/api/v2/facility", timeout=2)
    except httpx.TransportError:
        return False
    return True


def _tail(log: Path) -> str:
    text = log.read_text(errors="replace") if log.exists() else "(no log written)"
    return text[-LOG_TAIL:]


@contextmanager
def serve_process(
    argv: list[str],
    log: Path,
    env: Mapping[str, str],
    cwd: Path | None = None,
    stop_timeout: float = 15,
) -> Iterator[subprocess.Popen[bytes]]:
    """ARGV started (in CWD, if given) with its output (stdout and stderr) in LOG, ended when
    the block ends: terminated, killed if it does not stop within STOP_TIMEOUT seconds."""
    with log.open("wb") as stream:
        process = subprocess.Popen(
            argv, stdout=stream, stderr=subprocess.STDOUT, env=dict(env), cwd=cwd
        )
    try:
        yield process
    finally:
        _stop(process, stop_timeout)
        _keep(log)


def _stop(process: subprocess.Popen[bytes], timeout: float) -> None:
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)


@contextmanager
def running_serve(
    data_dir: Path,
    *,
    args: tuple[str, ...] = (),
    extra_env: Mapping[str, str] | None = None,
    base_env: Mapping[str, str] | None = None,
    log: Path | None = None,
    cwd: Path | None = None,
    timeout: float = 60,
    ready: Callable[[str], bool] = answers,
    stop_timeout: float = 15,
    workers: int | None = 1,
    port: int | None = None,
) -> Iterator[RunningServe]:
    """`iri-gateway serve --host 127.0.0.1 --port FREE --data-dir DATA_DIR [ARGS]` until the
    block ends.

    The environment is BASE_ENV (default: the clean one) with EXTRA_ENV over it, and
    `IRI_GATEWAY_WORKERS=WORKERS` under both (None: serve's own default, one per core on
    PostgreSQL). One by default: a test's server is one process (the pid it kills with
    `kill -9`, one replica) unless the test asks for workers.
    The port is PORT (a restart on the same address), else a free one.
    The output goes to LOG (default: `<data_dir>-serve.log` beside DATA_DIR). The block starts
    once `ready(url)` holds, within TIMEOUT seconds; the server is stopped however it ends.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    log = log or data_dir.parent / f"{data_dir.name}-serve.log"
    argv = [
        *CLI,
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
        *args,
    ]
    environment = {
        **({} if workers is None else {"IRI_GATEWAY_WORKERS": str(workers)}),
        **(dict(base_env) if base_env is not None else clean_env()),
        **(extra_env or {}),
    }
    with serve_process(argv, log, environment, cwd, stop_timeout) as process:
        served = RunningServe(f"http://127.0.0.1:{port}", process, log)
        deadline = time.monotonic() + timeout
        while not ready(served.url):
            if process.poll() is not None:
                raise AssertionError(f"serve exited ({process.returncode}): {_tail(log)}")
            if time.monotonic() > deadline:
                raise AssertionError(f"serve did not answer within {timeout} s: {_tail(log)}")
            time.sleep(0.1)
        try:
            yield served
        except BaseException as failure:
            if not isinstance(failure, GeneratorExit):
                sys.stderr.write(f"--- the log of serve at {served.url} ({log}):\n{_tail(log)}\n")
            raise
