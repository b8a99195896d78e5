"""Heterogeneous jobs: Slurm reports one line per component; the gateway tracks one job.

A cluster job runs as one het job (`#SBATCH hetjob` between the components). What Slurm
22.05.8 printed on the test cluster for a 2-component job (leader 30309):

- `sbatch --parsable` prints the leader's id only: `30309`.
- squeue `%i|%T|%k|%r` prints a line per component, `30309+0|RUNNING|tag|None` and
  `30309+1|RUNNING|tag|None`, in no fixed order (held: `+1` came before `+0`). Every line
  carries the job's comment. A held or waiting job shows its reason on every component
  (`JobHeldUser`, `BeginTime`); `scontrol release 30309` releases all of them.
- `scancel 30309` cancels every component, pending or running (both lines become
  `CANCELLED`). A running component can be cancelled alone (`scancel 30319+1`: the line
  says `CANCELLED` while `30319+0` still says `RUNNING`); a pending one cannot ("Operation
  not permitted on individual component of heterogeneous job").
- The job completion log (jobcomp/filetxt) has a record per component under the
  component's *own* job id (30309 and 30310, `HetJobId=30309 HetJobOffset=1`), with the
  batch script's `ExitCode` on every component. `sacct -c --jobs=30309` prints only
  `30309|COMPLETED|0:0` (and `sacct: error: Unknown type HetJobId: 30309` on stderr, exit
  0), so with jobcomp the leader's record stands for the job's history, and a component
  cancelled alone shows only in the live queue: after 30323+1 was cancelled and 30323+0
  ran to its end, squeue said `30323+0|COMPLETED` and `30323+1|CANCELLED` while the
  leader's jobcomp record said `30323|COMPLETED|0:0`.
- With accounting storage, `sacct -X` names components `93+0`, `93+1` (Slurm's
  heterogeneous-jobs documentation); they are aggregated like squeue's lines.

The aggregate (`aggregate`) is active while any component runs or has ended, queued (or
held) while all wait, and final only when every component is: failed if any failed (that
component's exit code and words are kept), canceled if any was cancelled and none failed,
completed otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from iri_gateway.models.job import JobState, NativeStatus

# Among final components, the one whose outcome the whole job takes.
_SEVERITY = {JobState.FAILED: 2, JobState.CANCELED: 1, JobState.COMPLETED: 0}
_NO_REASON = (None, "", "None", "(null)")


def split(job_id: str) -> tuple[str, int] | None:
    """`93+1` -> ('93', 1); None for anything that is not a het job component id."""
    leader, plus, offset = job_id.partition("+")
    if not plus or not leader.isdigit() or not offset.isdigit():
        return None
    return leader, int(offset)


def group(statuses: Iterable[NativeStatus]) -> dict[str, list[NativeStatus]]:
    """Component statuses by their leader's id, each list ordered by offset."""
    groups: dict[str, list[tuple[int, NativeStatus]]] = {}
    for status in statuses:
        parts = split(status.native_id)
        if parts is not None:
            groups.setdefault(parts[0], []).append((parts[1], status))
    return {
        leader: [s for _, s in sorted(items, key=lambda item: item[0])]
        for leader, items in groups.items()
    }


def aggregate(
    leader: str, components: Sequence[NativeStatus], history: NativeStatus | None = None
) -> NativeStatus:
    """One status for the het job `leader` from its components' statuses.

    `history` is the scheduler's record of the finished job (the leader's jobcomp record,
    with the exit code squeue does not give); it takes part in the decision, ahead of the
    components when they agree, and supplies the exit code the deciding component lacks.
    Components in states this gateway does not know keep the job from being final.
    """
    pool = [history, *components] if history is not None else list(components)
    state, chosen = _decide(pool)
    exit_code = chosen.exit_code
    if exit_code is None and history is not None and history.state == state:
        exit_code = history.exit_code
    reason = chosen.reason if chosen.reason not in _NO_REASON else None
    words = {_word(c.native_state) for c in components}
    if len(words) > 1:
        summary = "components " + ", ".join(f"{c.native_id} {c.native_state}" for c in components)
        reason = f"{reason}; {summary}" if reason else summary
    return NativeStatus(leader, state, chosen.native_state, exit_code, reason)


def _decide(pool: Sequence[NativeStatus]) -> tuple[JobState | None, NativeStatus]:
    """The job's state and the status whose words (and exit code) it takes."""
    if all(s.state is not None and s.state.final for s in pool):
        worst = max(pool, key=lambda s: _SEVERITY[s.state] if s.state else -1)
        return worst.state, worst
    started = [
        s for s in pool if s.state is not None and (s.state == JobState.ACTIVE or s.state.final)
    ]
    if started:
        running = [s for s in started if s.state == JobState.ACTIVE]
        return JobState.ACTIVE, (running or started)[0]
    held = [s for s in pool if s.state == JobState.HELD]
    if held:
        return JobState.HELD, held[0]
    unknown = [s for s in pool if s.state is None]
    if unknown:
        return None, unknown[0]
    return JobState.QUEUED, pool[0]


def _word(native: str) -> str:
    return native.split()[0].rstrip("+") if native.strip() else ""
