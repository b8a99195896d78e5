"""A batch system whose commands are timed and whose failures are counted, by resource.

Why a wrapper: every scheduler command of every plug-in (Slurm, PBS, local) goes through a
`BatchSystem`, so wrapping the one each backend is built with measures them all without a
line in any plug-in. The command label is the `BatchSystem` method (`submit`, `statuses`,
`cancel`, `find`, `update`, `requeue`, and `ping`, the health probe), the error label the
failure's exception type: both sets are fixed by the code, never by what a scheduler printed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, TypeVar

from iri_gateway.models.job import JobNodes, NativeStatus
from iri_gateway.models.job_arrays import ArrayIndices
from iri_gateway.schedulers.batch import BatchSystem, JobChanges

if TYPE_CHECKING:
    from iri_gateway.service.operations.metrics import PrometheusMetrics

T = TypeVar("T")


class MeasuredBatch:
    """`batch`'s commands, each recorded in `metrics` under `resource`."""

    def __init__(self, batch: BatchSystem, resource: str, metrics: PrometheusMetrics) -> None:
        self.batch = batch
        self.resource = resource
        self.metrics = metrics

    def _timed(self, command: str, call: Callable[[], T]) -> T:
        began = time.monotonic()
        try:
            answer = call()
        except BaseException as error:
            self.metrics.command(
                self.resource, command, time.monotonic() - began, type(error).__name__
            )
            raise
        self.metrics.command(self.resource, command, time.monotonic() - began, None)
        return answer

    def submit(self, script: str, *, tag: str) -> str:
        return self._timed("submit", lambda: self.batch.submit(script, tag=tag))

    def statuses(self, native_ids: Collection[str]) -> dict[str, NativeStatus]:
        return self._timed("statuses", lambda: self.batch.statuses(native_ids))

    def cancel(self, native_id: str) -> None:
        self._timed("cancel", lambda: self.batch.cancel(native_id))

    def cancel_elements(self, native_id: str, indices: ArrayIndices) -> None:
        self._timed("cancel", lambda: self.batch.cancel_elements(native_id, indices))

    def find(self, tag: str) -> str | None:
        return self._timed("find", lambda: self.batch.find(tag))

    def update(self, native_id: str, changes: JobChanges) -> None:
        self._timed("update", lambda: self.batch.update(native_id, changes))

    def requeue(self, native_id: str) -> str:
        return self._timed("requeue", lambda: self.batch.requeue(native_id))

    def nodes(self, native_id: str) -> JobNodes | None:
        return self._timed("nodes", lambda: self.batch.nodes(native_id))

    def ping(self, timeout: float) -> str:
        return self._timed("ping", lambda: self.batch.ping(timeout))
