"""One status cycle of a resource: what the scheduler says, turned into state changes.

The poller (`poller`) decides when and by which replica; this module asks the scheduler once
per resource and account, and records what changed (only what changed: a job the scheduler
reports as stored costs a comparison), with a cluster job's members read from
the files its script writes (`cluster_members`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from iri_gateway.models.array_elements import ArrayElements, ElementState
from iri_gateway.models.job import JobState, NativeStatus
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.service.jobs import cluster_members
from iri_gateway.service.jobs.context import JobsContext
from iri_gateway.service.operations.backends import Backend
from iri_gateway.service.operations.store import JobRecord, PollEntry, StateChange
from iri_gateway.transport.base import TransportError

log = logging.getLogger(__name__)


class Tracking:
    """Job states kept current from batched scheduler queries."""

    def __init__(self, context: JobsContext) -> None:
        self.context = context

    def refresh(self, resource_id: str, pending: Sequence[PollEntry] | None = None) -> int:
        """One status cycle for a resource: one batched query per account; returns changes.

        `pending` are the resource's unsettled jobs when the caller has already read them
        (the poller does, for all resources at once). A job the scheduler reports as it is
        stored costs a comparison of two fields: only changed jobs become `StateChange`s,
        and full records are read only for cluster jobs that may need their members read.

        Why per account, not one query per resource: each account's commands run through
        its own login (SSH as that user), and the status commands list that account's jobs
        (`squeue --me`; sites with Slurm's `PrivateData=jobs` or PBS's
        `query_other_jobs = false` show a user no one else's jobs), so another account's
        job would look gone. A local resource has one account: one query for every user.
        """
        context = self.context
        loaded = context.registry.get(resource_id)
        if pending is None:
            pending = context.store.poll_entries([resource_id])
        accounts: dict[str, str] = {}  # by owner, for jobs recorded before their accounts
        by_account: dict[str, list[PollEntry]] = {}
        for entry in pending:
            if entry.native_id is None:
                continue
            account = entry.account if entry.account is not None else accounts.get(entry.owner)
            if account is None:
                account = accounts[entry.owner] = context.backends.job_account(loaded, entry)
            by_account.setdefault(account, []).append(entry)
        changes: list[StateChange] = []
        clusters: list[tuple[PollEntry, Backend, StateChange | None]] = []
        arrays: list[tuple[PollEntry, NativeStatus]] = []
        for account, entries in by_account.items():
            backend = context.backends.for_account(loaded, account)
            statuses = backend.batch.statuses({e.native_id for e in entries if e.native_id})
            for entry in entries:
                status = statuses.get(entry.native_id or "")
                if status is None:
                    continue
                if entry.array_size is not None:
                    arrays.append((entry, status))
                    continue
                change = _change_for(entry, status)
                if entry.cluster_size is not None:
                    if change is not None or entry.state == JobState.ACTIVE:
                        clusters.append((entry, backend, change))
                elif change is not None:
                    # Applied only if nothing changed the job since it was read (a restart
                    # in between must not be overwritten by the earlier run's ending).
                    changes.append(replace(change, read_at=entry.updated_at))
        changes += self._cluster_changes(clusters)
        changes += self._array_changes(arrays)
        context.store.transition_many(changes)
        return len(changes)

    def _array_changes(self, arrays: list[tuple[PollEntry, NativeStatus]]) -> list[StateChange]:
        """The changes of array jobs: what the scheduler said of their elements merged into
        what was known (their full records read in one query), the array's state derived
        from all of them (`ArrayElements.state`)."""
        if not arrays:
            return []
        records = self.context.store.records([entry.id for entry, _ in arrays])
        changes = []
        for entry, status in arrays:
            record = records.get(entry.id)
            if record is None or record.updated_at != entry.updated_at:
                continue  # changed since it was polled (or gone): the next cycle sees it
            change = array_change(record, status)
            if change is not None:
                changes.append(replace(change, read_at=entry.updated_at))
        return changes

    def _cluster_changes(
        self, clusters: list[tuple[PollEntry, Backend, StateChange | None]]
    ) -> list[StateChange]:
        """The changes of cluster jobs, their members read when it is time (their full
        records read in one query: only cluster jobs that changed or run)."""
        if not clusters:
            return []
        records = self.context.store.records([entry.id for entry, _, _ in clusters])
        changes = []
        for entry, backend, change in clusters:
            record = records.get(entry.id)
            if record is None or record.updated_at != entry.updated_at or not entry.cluster_size:
                continue  # changed since it was polled (or gone): the next cycle sees it
            change = _with_members(record, backend, change, size=entry.cluster_size)
            if change is not None:
                changes.append(replace(change, read_at=entry.updated_at))
        return changes


def _with_members(
    record: JobRecord, backend: Backend, change: StateChange | None, *, size: int
) -> StateChange | None:
    """A cluster job's change with its members read, when this is the time to read them.

    The files are read (one command) when the job turns active or final, and on every
    cycle while it is active and its members are not stored yet: the script writes
    `members` as the job starts, maybe after the scheduler already says it runs. A
    failed job's message names the member that failed first.
    """
    state = change.state if change is not None else record.state
    turned = (
        change is not None
        and change.state != record.state
        and (state == JobState.ACTIVE or state.final)
    )
    if not turned and not (state == JobState.ACTIVE and not record.members):
        return change
    files = _read_cluster_files(record, backend)
    if files is None or not files.members:
        if state.final and record.members and change is not None:
            # Unreadable now: the members known so far end as the job did.
            views = [
                {**m, "state": state.value} if m.get("state") == "active" else m
                for m in record.members
            ]
            return StateChange(record.id, state, change.message, change.exit_code, members=views)
        return change
    if not state.final and len(files.members) < size:
        return change  # the script is still writing `members`
    outcome = cluster_members.outcome(files.members, files.exits or [], state, record.cluster_ports)
    message = change.message if change is not None else record.message or ""
    if state == JobState.FAILED and outcome.first_failure is not None:
        member, code = outcome.first_failure
        message = cluster_members.failure_message(member, code, message)
    exit_code = change.exit_code if change is not None else None
    return StateChange(record.id, state, message, exit_code, members=outcome.views)


def _read_cluster_files(record: JobRecord, backend: Backend) -> cluster_members.ClusterFiles | None:
    """Both files with one command through the job's transport; None when unreadable."""
    directory = record.paths.directory
    if not directory or record.native_id is None:
        log.warning("cluster job %s has no job directory or native id", record.id)
        return None
    folder = cluster_members.folder(directory, record.native_id)
    try:
        result = backend.transport.run(
            cluster_members.read_argv(folder), timeout=30, idempotent=True
        )
    except TransportError as error:
        log.warning("members of cluster job %s not read: %s", record.id, error)
        return None
    return cluster_members.parse_read(result, folder)


def array_change(record: JobRecord, status: NativeStatus) -> StateChange | None:
    """An array job's change, if any: its elements as known with the scheduler's news, and
    the state and counts they make. An element the user canceled (the whole array's cancel
    asked for) that the scheduler reports failed is canceled, as for a plain job.

    A status without elements is the scheduler's history of an array that left its live
    queue, where the history does not name elements (Slurm's job completion log): elements
    not seen ending are then `failed`, their end unknown (`GONE`), or `canceled` when the
    whole array's cancel was asked for."""
    known = known_elements(record)
    if status.elements is not None:
        news = dict(status.elements)
        if status.elements_complete:
            news.update(_left_the_queue(known, news, record.desired == "canceled"))
        merged = known.updated(news.items())
    else:
        gone = ElementState(
            JobState.CANCELED if record.desired == "canceled" else JobState.FAILED, GONE
        )
        merged = known.updated((i, gone) for i, element in known if not element.state.final)
    state = merged.state()
    if state == JobState.FAILED and record.desired == "canceled":
        state = JobState.CANCELED
    message = element_summary(merged, status)
    dumped = merged.dump()
    if state == record.state and message == record.message and dumped == record.elements:
        return None
    return StateChange(record.id, state, message, None, elements=dumped)


GONE = "GONE"
"""The native state of an element that left the scheduler's queue unseen, its end unknown."""


def _left_the_queue(
    known: ArrayElements, listed: dict[int, ElementState], canceled: bool
) -> list[tuple[int, ElementState]]:
    """Elements not ended that a complete listing no longer holds: one that was waiting
    never ran (Slurm drops a waiting element it cancels from the array's bracket, with no
    line of its own), so it is canceled; one that ran ended unseen (`GONE`)."""
    left = []
    for index, element in known:
        if element.state.final or index in listed:
            continue
        if element.state in (JobState.NEW, JobState.QUEUED, JobState.HELD):
            left.append((index, ElementState(JobState.CANCELED, "CANCELLED")))
        else:
            state = JobState.CANCELED if canceled else JobState.FAILED
            left.append((index, ElementState(state, GONE)))
    return left


def known_elements(record: JobRecord) -> ArrayElements:
    """What is known of an array job's elements: as last read, or, before its first poll,
    every element waiting (`new` until the scheduler has it)."""
    if record.elements:
        return ArrayElements.load(record.elements)
    array = JobSpec.model_validate(record.effective_spec).array
    if array is None:
        return ArrayElements()
    waiting = ElementState(JobState.NEW if record.native_id is None else JobState.QUEUED, "")
    return ArrayElements.of((index, waiting) for index in array.elements())


def element_summary(elements: ArrayElements, status: NativeStatus) -> str:
    """The array's message: its elements counted by state, in IRI's order, and the
    scheduler's word on the array when it gave one."""
    counts = elements.counts()
    text = ", ".join(f"{counts[s.value]} {s.value}" for s in JobState if counts.get(s.value))
    gone = sum(len(run) for run in elements.runs if run.status.native_state == GONE)
    if gone:
        text += f"; {gone} left the scheduler's queue unseen, their end unknown"
    return f"array of {len(elements)}: {text}" + (f" ({status.reason})" if status.reason else "")


def _change_for(record: JobRecord | PollEntry, status: NativeStatus) -> StateChange | None:
    """What a scheduler report changes for a record, if anything.

    An unknown native state keeps the previous IRI state; a job killed after the user asked
    to cancel it is canceled, whatever the scheduler calls it.
    """
    state = status.state or record.state
    if state == JobState.FAILED and record.desired == "canceled":
        state = JobState.CANCELED
    if state == record.state and status.message == record.message:
        return None
    return StateChange(record.id, state, status.message, status.exit_code)
