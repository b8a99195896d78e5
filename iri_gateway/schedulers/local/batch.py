"""The `local` scheduler: each job is a detached bash process on the gateway host.

Every job gets a folder under the data directory holding the script, the process id, the
exit code once it ends, and the default stdout/stderr. The process is started in its own
session (`setsid --fork`), so it outlives a gateway restart and is never a zombie of ours;
status reads the folder, so a restarted gateway picks its jobs up where they are. The script
sees its native id as `$IRI_LOCAL_JOB_ID`, as a Slurm script sees `$SLURM_JOB_ID` (a cluster
job names its folder of members after it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Collection
from pathlib import Path

from iri_gateway.errors import CancelError, RestartError, SubmitError, UpdateError
from iri_gateway.models.job import JobNodes, JobState, NativeStatus
from iri_gateway.schedulers.batch import JobChanges

JOB_ID_VARIABLE = "IRI_LOCAL_JOB_ID"
_WRAPPER = (
    'echo "$$" > pid.tmp && mv pid.tmp pid; '
    "bash script.sh > stdout 2> stderr < /dev/null; "
    'echo "$?" > exit_code.tmp && mv exit_code.tmp exit_code'
)


LOOPBACK = "127.0.0.1"


class LocalBatch:
    """Jobs as local processes, one folder each under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _folder(self, native_id: str) -> Path:
        if "/" in native_id or native_id in ("", ".", ".."):
            raise ValueError(f"not a local job id: {native_id!r}")
        return self.root / native_id

    def submit(self, script: str, *, tag: str) -> str:
        native_id = tag.rsplit(":", 1)[-1]
        folder = self._folder(native_id)
        folder.mkdir(parents=True, exist_ok=False)
        (folder / "script.sh").write_text(script, encoding="utf-8")
        (folder / "tag").write_text(tag, encoding="utf-8")
        self._start(native_id, folder, SubmitError)
        return native_id

    def _start(
        self, native_id: str, folder: Path, error_type: type[SubmitError] | type[RestartError]
    ) -> None:
        """Start the folder's script as a detached process (its own session)."""
        argv = ["setsid", "--fork", "bash", "-c", _WRAPPER]
        launcher_log = folder / "launcher.log"
        try:
            # No pipes: the detached job would hold them open and make us wait for it.
            with launcher_log.open("wb") as log:
                subprocess.run(
                    argv,
                    cwd=folder,
                    check=True,
                    timeout=30,
                    env={**os.environ, JOB_ID_VARIABLE: native_id},
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                )
        except (OSError, subprocess.SubprocessError) as error:
            words = launcher_log.read_text(errors="replace") if launcher_log.exists() else ""
            raise error_type(
                argv, getattr(error, "returncode", -1), "", words or str(error)
            ) from None

    def statuses(self, native_ids: Collection[str]) -> dict[str, NativeStatus]:
        found: dict[str, NativeStatus] = {}
        for native_id in native_ids:
            folder = self._folder(native_id)
            if folder.is_dir():
                found[native_id] = self._status(native_id, folder)
        return found

    def _status(self, native_id: str, folder: Path, *, again: bool = True) -> NativeStatus:
        canceled = (folder / "canceled").exists()
        exit_file = folder / "exit_code"
        if exit_file.exists():
            code = int(exit_file.read_text().strip())
            if canceled:
                return NativeStatus(native_id, JobState.CANCELED, "CANCELED", code)
            state = JobState.COMPLETED if code == 0 else JobState.FAILED
            return NativeStatus(native_id, state, "EXITED", code)
        pid_file = folder / "pid"
        if not pid_file.exists():
            return NativeStatus(native_id, JobState.QUEUED, "STARTING")
        pid = int(pid_file.read_text().strip())
        if _alive_in(pid, folder):
            return NativeStatus(native_id, JobState.ACTIVE, "RUNNING", reason=f"pid {pid}")
        if again:
            # The wrapper may have written the exit code and ended between the look for the
            # file and the look for the process: look once more before calling it vanished.
            return self._status(native_id, folder, again=False)
        if canceled:
            return NativeStatus(native_id, JobState.CANCELED, "CANCELED")
        return NativeStatus(
            native_id,
            JobState.FAILED,
            "VANISHED",
            reason=f"process {pid} ended without recording an exit code",
        )

    def cancel(self, native_id: str) -> None:
        folder = self._folder(native_id)
        (folder / "canceled").touch()
        pid_file = folder / "pid"
        if not pid_file.exists() or (folder / "exit_code").exists():
            return
        pid = int(pid_file.read_text().strip())
        if not _alive_in(pid, folder):
            return
        try:
            _signal_session(pid, signal.SIGTERM)
        except PermissionError as error:
            raise CancelError(["kill", "-TERM", f"-{pid}"], 1, "", str(error)) from None

    def nodes(self, native_id: str) -> JobNodes | None:
        """A running local job is a process of this machine, reached on loopback (its cluster
        members name this machine as `$HOSTNAME`, its host name)."""
        status = self.statuses([native_id]).get(native_id)
        if status is None or status.state is not JobState.ACTIVE:
            return None
        return JobNodes("localhost", {"localhost": LOOPBACK, socket.gethostname(): LOOPBACK})

    def ping(self, timeout: float) -> str:
        """Nothing to ask: jobs are processes of this machine, with no scheduler daemon."""
        return "no scheduler to ask: jobs run as processes of the gateway's machine"

    def requeue(self, native_id: str) -> str:
        """The local scheduler's own restart: a running job's process group gets SIGTERM
        and is waited for (up to 30 s), the last run's pid, exit code and cancel mark are
        removed, and the same script starts again under the same native id."""
        folder = self._folder(native_id)
        argv = ["restart", native_id]
        if not (folder / "script.sh").exists():
            raise RestartError(argv, 1, "", f"no local job {native_id}")
        pid_file = folder / "pid"
        if pid_file.exists() and not (folder / "exit_code").exists():
            pid = int(pid_file.read_text().strip())
            if _alive_in(pid, folder):
                _signal_session(pid, signal.SIGTERM)
                deadline = time.monotonic() + 30
                while _alive_in(pid, folder):
                    if time.monotonic() > deadline:
                        raise RestartError(argv, 1, "", f"process {pid} did not stop in 30 s")
                    time.sleep(0.05)
        for name in ("pid", "exit_code", "canceled"):
            (folder / name).unlink(missing_ok=True)
        self._start(native_id, folder, RestartError)
        return f"local restart of {native_id}"

    def find(self, tag: str) -> str | None:
        native_id = tag.rsplit(":", 1)[-1]
        folder = self._folder(native_id)
        return native_id if (folder / "tag").exists() else None

    def update(self, native_id: str, changes: JobChanges) -> None:
        raise UpdateError(
            ["update", native_id],
            1,
            "",
            "local jobs start at once; there is no queued job to change",
        )


def _session_of(pid: int) -> int | None:
    """The session id of process `pid` (/proc/PID/stat, field 6), None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or parentheses.
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[3]) if len(fields) > 3 else None


def _signal_session(leader: int, signum: int) -> None:
    """Send `signum` to every process of the job's session: its process group, and the
    groups its programs made of their own (`timeout`, a shell's job control), which
    `killpg` alone would leave running after a cancel. The job started the session
    (`setsid`), so its pid is the session id; a process of ours that is not the job's has
    another."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(leader, signum)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == leader:
            continue
        if _session_of(int(entry.name)) == leader:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signum)


def _alive_in(pid: int, folder: Path) -> bool:
    """True when `pid` runs and is ours (its working directory is the job folder)."""
    try:
        return Path(f"/proc/{pid}/cwd").resolve() == folder.resolve()
    except OSError:
        return False
