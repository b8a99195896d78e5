"""The live status line `wait(progress=True)` shows on stderr while a job runs (rich)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console

from iri_gateway.client.models import JobInfo


@contextmanager
def status_line(job_id: str, progress: bool | Console) -> Iterator[Callable[[JobInfo], None]]:
    """A function to call with each status read: it redraws one line (state, message,
    elapsed time) and prints a line for each change of state above it, so the job's course
    stays on screen; a no-op when `progress` is false. A Console may be given to draw on."""
    if progress is False:
        yield lambda job: None
        return
    console = progress if isinstance(progress, Console) else Console(stderr=True)
    started = time.monotonic()
    last: list[str] = []
    with console.status(f"job {job_id}: waiting") as live:

        def show(job: JobInfo) -> None:
            message = f" ({job.message})" if job.message else ""
            elapsed = int(time.monotonic() - started)
            if last != [job.state.value]:
                console.print(
                    f"job {job_id}: {job.state.value}{message}", markup=False, highlight=False
                )
                last[:] = [job.state.value]
            live.update(f"job {job_id}: {job.state.value}{message}, {elapsed} s")

        yield show
