"""What this engine is sending to a scheduler right now, for its own reconcile to leave alone.

Other replicas see the same fact in the store (`claimed_by`); within one process this set is
the quicker and surer answer, and it also keeps the first attempt of each submission so that
a retry with the same idempotency key can wait for the very same attempt.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future

from iri_gateway.service.operations.store import JobRecord


class InFlight:
    """Jobs this engine is sending, and the first submission attempt of each; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sending: set[str] = set()
        self._first_attempts: dict[str, Future[JobRecord]] = {}

    def claim(self, job_id: str) -> None:
        """Mark the job as this engine's to send: the reconcile leaves it alone."""
        with self._lock:
            self._sending.add(job_id)

    def release(self, job_id: str) -> None:
        """The job is no longer being sent by this engine."""
        with self._lock:
            self._sending.discard(job_id)

    def sending(self, job_id: str) -> bool:
        """Whether this engine is sending the job now."""
        with self._lock:
            return job_id in self._sending

    def first_attempt(self, job_id: str) -> Future[JobRecord] | None:
        """The first submission attempt of the job while it runs; None once it has ended."""
        with self._lock:
            return self._first_attempts.get(job_id)

    def track_first_attempt(self, job_id: str, future: Future[JobRecord]) -> None:
        """Keep the job's first attempt until it ends, for retries to wait on."""
        with self._lock:
            self._first_attempts[job_id] = future

        def forget(_: Future[JobRecord]) -> None:
            with self._lock:
                self._first_attempts.pop(job_id, None)

        future.add_done_callback(forget)
