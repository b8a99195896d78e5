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
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Collection
from pathlib import Path

from iri_gateway.errors import CancelError, RestartError, SubmitError, UpdateError
from iri_gateway.models.array_elements import ArrayElements, ElementState
from iri_gateway.models.job import JobNodes, JobState, NativeStatus
from iri_gateway.models.job_arrays import ArrayIndices
from iri_gateway.schedulers.batch import JobChanges
from iri_gateway.schedulers.local.directives import ARRAY_DIRECTIVE

JOB_ID_VARIABLE = "IRI_LOCAL_JOB_ID"
_WRAPPER = (
    'echo "$$" > pid.tmp && mv pid.tmp pid; '
    "bash script.sh > stdout 2> stderr < /dev/null; "
    'echo "$?" > exit_code.tmp && mv exit_code.tmp exit_code'
)


LOOPBACK = "127.0.0.1"
ARRAY_INDEX_VARIABLE = "IRI_LOCAL_ARRAY_INDEX"
"""An element's index, as the local script reads it (`ArrayRules.index_variable`)."""
_ARRAY_WRAPPER = (
    # The array's runner: elements in order, at most $IRI_LOCAL_ARRAY_THROTTLE at a time.
    # Each element is a wrapper (its pid in elements/I.pid, its working directory the job
    # folder, as a job's wrapper) around a session of its own (elements/I.sid) running the
    # script, so that one element can be stopped without the others.
    'echo "$$" > pid.tmp && mv pid.tmp pid; mkdir -p elements; '
    'xargs -a indices -P "$IRI_LOCAL_ARRAY_THROTTLE" -n 1 bash -c \''
    "i=$1; "
    '[ -e canceled ] || [ -e "elements/$i.canceled" ] && exit 0; '
    'echo "$$" > "elements/$i.pid"; '
    'setsid --wait bash -c "echo \\$\\$ > elements/$i.sid; '
    f'{ARRAY_INDEX_VARIABLE}=$i exec bash script.sh" '
    '> "elements/$i.out" 2> "elements/$i.err" < /dev/null; '
    'echo "$?" > "elements/$i.exit.tmp" && mv "elements/$i.exit.tmp" "elements/$i.exit"'
    "' element; "
    "echo 0 > exit_code.tmp && mv exit_code.tmp exit_code"
)


SESSION_WAIT = 2.0
"""Seconds a cancel waits for a starting array element to write its session id."""


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
        array = _array_of(script)
        folder.mkdir(parents=True, exist_ok=False)
        (folder / "script.sh").write_text(script, encoding="utf-8")
        if array is not None:
            indices, throttle = array
            (folder / "indices").write_text("".join(f"{i}\n" for i in indices), encoding="ascii")
            (folder / "throttle").write_text(str(throttle), encoding="ascii")
        (folder / "tag").write_text(tag, encoding="utf-8")
        self._start(native_id, folder, SubmitError)
        return native_id

    def _start(
        self, native_id: str, folder: Path, error_type: type[SubmitError] | type[RestartError]
    ) -> None:
        """Start the folder's script (or array runner) as a detached process (its own
        session)."""
        environment = {**os.environ, JOB_ID_VARIABLE: native_id}
        wrapper = _WRAPPER
        if (folder / "indices").exists():
            wrapper = _ARRAY_WRAPPER
            environment["IRI_LOCAL_ARRAY_THROTTLE"] = (folder / "throttle").read_text()
        argv = ["setsid", "--fork", "bash", "-c", wrapper]
        launcher_log = folder / "launcher.log"
        try:
            # No pipes: the detached job would hold them open and make us wait for it.
            with launcher_log.open("wb") as log:
                subprocess.run(
                    argv,
                    cwd=folder,
                    check=True,
                    timeout=30,
                    env=environment,
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
                status = self._status(native_id, folder)
                if (folder / "indices").exists():
                    status = self._array_status(status, folder)
                found[native_id] = status
        return found

    def _array_status(self, runner: NativeStatus, folder: Path) -> NativeStatus:
        """An array's status: each element's, from its files (its exit code once it ended; a
        live wrapper while it runs; waiting before), and the array's state derived from
        them (`ArrayElements.state`)."""
        elements = folder / "elements"
        canceled = (folder / "canceled").exists()
        runner_gone = runner.state is not None and runner.state.final
        seen: list[tuple[int, ElementState]] = []
        for line in (folder / "indices").read_text().split():
            index = int(line)
            seen.append((index, _element_state(elements, index, folder, canceled, runner_gone)))
        states = ArrayElements.of(seen)
        return NativeStatus(
            runner.native_id, states.state(), "ARRAY", elements=states, elements_complete=True
        )

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
        if (folder / "indices").exists():
            # Elements run in sessions of their own, each watched by a wrapper of the
            # runner's session: stopped first, while their wrappers live to vouch for them.
            self._stop_elements(folder, None)
        if _alive_in(pid, folder):
            try:
                _signal_session(pid, signal.SIGTERM)
            except PermissionError as error:
                raise CancelError(["kill", "-TERM", f"-{pid}"], 1, "", str(error)) from None

    def cancel_elements(self, native_id: str, indices: ArrayIndices) -> None:
        """Cancel these elements of an array: those waiting never start, those running get
        SIGTERM (the others run on)."""
        folder = self._folder(native_id)
        elements = folder / "elements"
        elements.mkdir(exist_ok=True)
        for index in indices:
            (elements / f"{index}.canceled").touch()
        self._stop_elements(folder, indices)

    def _stop_elements(self, folder: Path, indices: ArrayIndices | None) -> None:
        """SIGTERM the sessions of the array's running elements (of `indices`; None: all).

        An element runs while its wrapper does (`_alive_in`: its pid, in the job folder).
        The session id left by an element whose wrapper was killed (a cancel of the whole
        array) is a free pid, soon another process's: a session of the gateway's own (a
        file transfer agent) was killed so in CI by a second cancel of such an array. An
        element whose wrapper runs but whose session has not written its id yet (it is
        starting) is waited for, up to `SESSION_WAIT` seconds: it was missed, and ran on."""
        elements = folder / "elements"
        for pid_file in elements.glob("*.pid"):
            index = int(pid_file.name.split(".", 1)[0])
            if indices is not None and index not in indices:
                continue
            with contextlib.suppress(OSError):
                wrapper, session = _element_ids(elements, index, folder)
                if wrapper is None or session is None or not _alive_in(wrapper, folder):
                    continue
                if not (elements / f"{index}.exit").exists():
                    _signal_session(session, signal.SIGTERM)

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
        if (folder / "indices").exists():  # an array: every element runs again
            self._stop_elements(folder, None)
            shutil.rmtree(folder / "elements", ignore_errors=True)
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


def _element_state(
    elements: Path, index: int, folder: Path, canceled: bool, runner_gone: bool
) -> ElementState:
    """One element's state from its files (see `_ARRAY_WRAPPER`)."""
    canceled = canceled or (elements / f"{index}.canceled").exists()
    exit_file = elements / f"{index}.exit"
    if exit_file.exists():
        code = int(exit_file.read_text().strip())
        if canceled:
            return ElementState(JobState.CANCELED, "CANCELED", code)
        return ElementState(JobState.COMPLETED if code == 0 else JobState.FAILED, "EXITED", code)
    pid_file = elements / f"{index}.pid"
    if pid_file.exists() and _alive_in(int(pid_file.read_text().strip()), folder):
        return ElementState(JobState.ACTIVE, "RUNNING")
    if canceled:
        return ElementState(JobState.CANCELED, "CANCELED")
    if pid_file.exists() or runner_gone:
        # Started and gone without an exit code, or never started by a runner that ended.
        return ElementState(JobState.FAILED, "VANISHED")
    return ElementState(JobState.QUEUED, "WAITING")


def _array_of(script: str) -> tuple[list[int], int] | None:
    """The indices and throttle of a local array script, or None for a plain job. The
    throttle defaults to this machine's CPU count.

    Only the script's second line is read, where local.sh.j2 puts its one directive, right
    after `#!/bin/bash`: further down a user's quoted value may span lines, and one of them
    could read like the directive (an environment value "...\n#IRI-LOCAL --array=0-4000000").
    """
    lines = script.split("\n", 2)
    if len(lines) < 2 or not lines[1].startswith(ARRAY_DIRECTIVE):
        return None
    written, _, throttle = lines[1][len(ARRAY_DIRECTIVE) :].partition("%")
    indices = list(ArrayIndices.parse(written))
    return indices, int(throttle) if throttle else (os.cpu_count() or 1)


def _element_ids(elements: Path, index: int, folder: Path) -> tuple[int | None, int | None]:
    """The pids of element `index`'s wrapper and session, read as they are written (each
    file by `echo`, so briefly empty); the session waited for up to `SESSION_WAIT` seconds
    while the wrapper lives. None for what is not there."""
    deadline = time.monotonic() + SESSION_WAIT
    wrapper: int | None = None
    while True:
        said = _read_pid(elements / f"{index}.pid")
        wrapper = said if said is not None else wrapper
        session = _read_pid(elements / f"{index}.sid")
        if session is not None or time.monotonic() >= deadline:
            return wrapper, session
        if wrapper is not None and not _alive_in(wrapper, folder):
            return wrapper, None
        time.sleep(0.01)


def _read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


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
