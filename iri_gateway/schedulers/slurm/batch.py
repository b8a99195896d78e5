"""Slurm through a transport: sbatch, squeue (+ sacct for history), scancel, scontrol
(update, requeue)."""

from __future__ import annotations

import time
from collections.abc import Collection

from iri_gateway.errors import StatusError
from iri_gateway.models.job import JobNodes, NativeStatus
from iri_gateway.models.job_arrays import ArrayIndices
from iri_gateway.schedulers.batch import JobChanges
from iri_gateway.schedulers.slurm import (
    hetjob,
    nodes,
    ping,
    requeue,
    sacct,
    sbatch,
    scancel,
    scontrol,
    squeue,
)
from iri_gateway.transport.base import Transport


class SlurmBatch:
    """Slurm's commands for one account; `history` says where finished jobs are found."""

    def __init__(
        self, transport: Transport, *, history: str = "jobcomp", settle_seconds: float = 60.0
    ) -> None:
        self.transport = transport
        self.history = history
        self.settle_seconds = settle_seconds

    def submit(self, script: str, *, tag: str) -> str:
        return sbatch.parse(self.transport.run(sbatch.argv(tag), stdin=script, timeout=120))

    def statuses(self, native_ids: Collection[str]) -> dict[str, NativeStatus]:
        """One squeue call for all jobs; sacct only for the ones finished or gone from it."""
        wanted = set(native_ids)
        if not wanted:
            return {}
        queue = squeue.parse(self.transport.run(squeue.argv(), idempotent=True))
        live = queue.statuses
        found = {job_id: live[job_id] for job_id in wanted if job_id in live}
        # An array in the live queue is read there whole, exit codes included (`arrays`).
        settled = [
            job_id
            for job_id in wanted
            if job_id not in live or (_final(live[job_id]) and live[job_id].elements is None)
        ]
        if settled and self.history != "none":
            command = sacct.argv(settled, jobcomp=self.history == "jobcomp")
            try:
                past = sacct.parse(self.transport.run(command, idempotent=True))
            except StatusError as error:
                # The live queue's word on the state still holds; only the exit code is missing.
                return {job_id: _without_history(status, error) for job_id, status in found.items()}
            for job_id in settled:
                if job_id in past:
                    found[job_id] = _settle(job_id, past[job_id], queue.components.get(job_id))
        return found

    def cancel(self, native_id: str) -> None:
        scancel.parse(self.transport.run(scancel.argv(native_id)))

    def cancel_elements(self, native_id: str, indices: ArrayIndices) -> None:
        scancel.parse(self.transport.run(scancel.elements_argv(native_id, indices)))

    def find(self, tag: str) -> str | None:
        queue = squeue.parse(self.transport.run(squeue.argv(), idempotent=True))
        return queue.tags.get(tag)

    def update(self, native_id: str, changes: JobChanges) -> None:
        scontrol.parse(self.transport.run(scontrol.argv(native_id, changes)))

    def nodes(self, native_id: str) -> JobNodes | None:
        job = nodes.parse_job(self.transport.run(nodes.job_argv(native_id), idempotent=True))
        if job is None:
            return None
        batch_host, node_lists = job
        command = nodes.nodes_argv(node_lists)
        return nodes.parse_nodes(self.transport.run(command, idempotent=True), batch_host)

    def ping(self, timeout: float) -> str:
        return ping.parse(self.transport.run(ping.argv(), timeout=timeout, idempotent=True))

    def requeue(self, native_id: str) -> str:
        """`scontrol requeue`, then the requeue delay lifted once that is safe (see
        `requeue`): within `settle_seconds` the words say the job starts at once; after
        them, that it starts after Slurm's own delay."""
        command = " ".join(requeue.argv(native_id))
        requeue.parse(self.transport.run(requeue.argv(native_id)))
        deadline = time.monotonic() + self.settle_seconds
        while not requeue.left_its_nodes(
            self.transport.run(requeue.states_argv(native_id), idempotent=True)
        ):
            if time.monotonic() > deadline:
                return (
                    f"{command} (the earlier run is still leaving its nodes: Slurm starts "
                    "the job after its requeue delay)"
                )
            time.sleep(0.5)
        time.sleep(1.5)  # past the second in which the nodes revoked the earlier credential
        requeue.parse(self.transport.run(requeue.release_argv(native_id)))
        return command


def _final(status: NativeStatus) -> bool:
    return status.state is not None and status.state.final


def _settle(job_id: str, past: NativeStatus, components: list[NativeStatus] | None) -> NativeStatus:
    """The history's word on a finished job; for a het job, joined with its components.

    With jobcomp, sacct for the leader's id gives the leader component's record only, so a
    component that ended differently (cancelled alone) is known from the live queue only.
    """
    return hetjob.aggregate(job_id, components, past) if components else past


def _without_history(status: NativeStatus, error: StatusError) -> NativeStatus:
    if not _final(status):
        return status
    reason = f"exit code unavailable: {error.stderr.strip() or error}"
    return NativeStatus(status.native_id, status.state, status.native_state, None, reason)
