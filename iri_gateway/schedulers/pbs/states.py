"""PBS Pro / OpenPBS job states (qstat's one-letter `job_state`) and exit statuses -> IRI states.

Letters, as qstat(1B) documents them: B array job begun, E exiting after having run, F finished,
H held, M moved to another server, Q queued, R running, S suspended, T in transit, U suspended
because the workstation is busy, W waiting for its execution time, X subjob finished (expired).

`Exit_status` of a finished job (OpenPBS `src/include/job.h`, PBS Reference Guide "Job exit
status"): 0 success; 1-255 the exit code of the job script; 256 + N when the job's shell was
killed by signal N (271 = 256 + SIGTERM); negative values are `JOB_EXEC_*` codes, set by PBS
itself when it could not run the job or killed it for exceeding a limit.

A job removed with qdel ends with substate 91 (`JOB_SUBSTATE_TERMINATED`; the server sets it for
jobs "terminated by deljob batch req"), a normal end with 92 (FINISHED) or 93 (FAILED). The
server's finishing comment says the same in words ("Job run at ... and terminated").
"""

from __future__ import annotations

import re
import signal

from iri_gateway.models.job import JobState

# Jobs that have not ended. Held-like states (held, suspended by the server or because the
# workstation became busy) are `held`; waiting for a start time, in transit between queues or
# moved to another server are still `queued` as far as the user is concerned.
_LIVE: dict[str, JobState] = {
    "Q": JobState.QUEUED,
    "W": JobState.QUEUED,
    "T": JobState.QUEUED,
    "M": JobState.QUEUED,
    "H": JobState.HELD,
    "S": JobState.HELD,
    "U": JobState.HELD,
    "R": JobState.ACTIVE,
    "E": JobState.ACTIVE,
    "B": JobState.ACTIVE,
}
# Jobs that have ended: the outcome comes from Exit_status and the deletion evidence.
ENDED = frozenset({"F", "X"})

SUBSTATE_TERMINATED = 91  # JOB_SUBSTATE_TERMINATED: ended because of a qdel
SUBSTATE_FINISHED = 92
SUBSTATE_FAILED = 93

SIGNAL_BASE = 256

# JOB_EXEC_* codes of OpenPBS src/include/job.h (-24 to -30 appeared in later releases).
JOB_EXEC: dict[int, tuple[str, str]] = {
    -1: ("JOB_EXEC_FAIL1", "job exec failed, before files, no retry"),
    -2: ("JOB_EXEC_FAIL2", "job exec failed, after files, no retry"),
    -3: ("JOB_EXEC_RETRY", "job execution failed, do retry"),
    -4: ("JOB_EXEC_INITABT", "job aborted on MOM initialization"),
    -5: ("JOB_EXEC_INITRST", "job aborted on MOM init, checkpoint, no migrate"),
    -6: ("JOB_EXEC_INITRMG", "job aborted on MOM init, checkpoint, ok migrate"),
    -7: ("JOB_EXEC_BADRESRT", "job restart failed"),
    -10: ("JOB_EXEC_FAILUID", "invalid uid/gid for job"),
    -11: ("JOB_EXEC_RERUN", "job rerun"),
    -12: ("JOB_EXEC_CHKP", "job was checkpointed and killed"),
    -13: ("JOB_EXEC_FAIL_PASSWORD", "job failed due to a bad password"),
    -14: ("JOB_EXEC_RERUN_SIS_FAIL", "job rerun after a sister MOM failed"),
    -15: ("JOB_EXEC_QUERST", "requeue job for restart from checkpoint"),
    -16: ("JOB_EXEC_FAILHOOK_RERUN", "job exec failed due to a hook rejection, requeued"),
    -17: ("JOB_EXEC_FAILHOOK_DELETE", "job exec failed due to a hook rejection, deleted"),
    -18: ("JOB_EXEC_HOOK_RERUN", "a hook requested the job be requeued"),
    -19: ("JOB_EXEC_HOOK_DELETE", "a hook requested the job be deleted"),
    -20: ("JOB_EXEC_RERUN_MS_FAIL", "mother superior connection failed"),
    -21: ("JOB_EXEC_FAIL_SECURITY", "security breach in PBS directory"),
    -22: ("JOB_EXEC_HOOKERROR", "job exec failed: hook exception or hook timed out"),
    -23: ("JOB_EXEC_FAIL_KRB5", "no Kerberos credentials supplied"),
    -24: ("JOB_EXEC_KILL_NCPUS_BURST", "killed for exceeding ncpus (burst)"),
    -25: ("JOB_EXEC_KILL_NCPUS_SUM", "killed for exceeding ncpus (sum)"),
    -26: ("JOB_EXEC_KILL_VMEM", "killed for exceeding vmem"),
    -27: ("JOB_EXEC_KILL_MEM", "killed for exceeding mem"),
    -28: ("JOB_EXEC_KILL_CPUT", "killed for exceeding cput"),
    -29: ("JOB_EXEC_KILL_WALLTIME", "killed for exceeding walltime"),
    -30: ("JOB_EXEC_JOINJOB", "job exec failed due to a join job error"),
}

# What the server's comment says about a job that was deleted, in its own words.
_DELETED_WORDS = re.compile(r"\band terminated\b|\bdeleted\b", re.IGNORECASE)


def was_deleted(substate: int | None, comment: str | None) -> bool:
    """Whether a finished job ended because someone deleted it (qdel)."""
    return substate == SUBSTATE_TERMINATED or bool(comment and _DELETED_WORDS.search(comment))


def map_state(
    letter: str, exit_status: int | None = None, *, deleted: bool = False
) -> JobState | None:
    """The IRI state for a qstat `job_state`; None for a letter this gateway does not know.

    A finished job (F, or X for a subjob) is `canceled` when it was deleted, `completed` when it
    exited 0 and `failed` otherwise (non-zero exit, killed by a signal or by PBS for a limit,
    or ended without any exit status).
    """
    if letter in ENDED:
        if deleted:
            return JobState.CANCELED
        return JobState.COMPLETED if exit_status == 0 else JobState.FAILED
    return _LIVE.get(letter)


def signal_name(number: int) -> str | None:
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def explain_exit(exit_status: int | None) -> str | None:
    """Words for an Exit_status that is not a plain script exit code; None for 0-255."""
    if exit_status is None or 0 <= exit_status < SIGNAL_BASE:
        return None
    if exit_status < 0:
        name, text = JOB_EXEC.get(exit_status, ("JOB_EXEC", "PBS could not run or finish the job"))
        return f"{name} ({exit_status}): {text}"
    number = exit_status - SIGNAL_BASE
    called = signal_name(number)
    return f"killed by signal {number}" + (f" ({called})" if called else "")
