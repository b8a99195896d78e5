"""Reading jobs: one job, a resource's list, a page of everything, and a job's output.

Reads come from the store, never from the scheduler (the poller keeps it current), and only
a caller's own jobs are found: another user's job is "not found", like no job.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from iri_gateway.models.job import JobState
from iri_gateway.service.files.reads import decode_part
from iri_gateway.service.files.refusals import FileRefusedError
from iri_gateway.service.jobs.context import JobsContext, job_directory
from iri_gateway.service.jobs.errors import JobNotFoundError, OutputUnavailableError
from iri_gateway.service.jobs.files import JobFiles
from iri_gateway.service.operations.store import JobFilters, JobRecord

Stream = Literal["stdout", "stderr"]


@dataclass(frozen=True)
class JobPage:
    """A page of one owner's jobs and the number of jobs matching the same filters."""

    records: list[JobRecord]
    total: int


class Reading:
    """The caller's jobs as the store has them, and their output files."""

    def __init__(self, context: JobsContext, files: JobFiles) -> None:
        self.context = context
        self.job_files = files

    def get(self, *, owner: str, job_id: str) -> JobRecord:
        """The job `job_id` of `owner`; JobNotFoundError for anyone else's or no job."""
        return self.context.owned(owner, job_id)

    def known(self, *, owner: str, job_id: str) -> JobRecord | None:
        """The job `job_id` of `owner` if the store holds it in memory, without I/O (None:
        it must be read with `get`); JobNotFoundError when it is someone else's."""
        record = self.context.store.cached(job_id)
        if record is not None and record.owner != owner:
            raise JobNotFoundError(f"no job {job_id!r}")
        return record

    def jobs(
        self,
        *,
        owner: str,
        resource_id: str,
        states: Sequence[JobState] | None = None,
        name: str | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> list[JobRecord]:
        """The owner's jobs on a resource, oldest first, filtered before paging."""
        # an unknown resource is an error, not an empty list
        self.context.registry.get(resource_id)
        return self.context.store.find(
            owner=owner,
            resource_id=resource_id,
            states=states,
            name=name,
            offset=offset,
            limit=limit,
        )

    def job_page(
        self,
        *,
        owner: str,
        states: Sequence[JobState] | None = None,
        text: str | None = None,
        offset: int = 0,
        limit: int,
    ) -> JobPage:
        """One page of the owner's jobs on every resource, newest first, and how many match
        in all: a list of any length is read one page at a time."""
        store = self.context.store
        filters: JobFilters = {"owner": owner, "states": states, "text": text}
        records = store.find(newest_first=True, offset=offset, limit=limit, **filters)
        total = store.count(**filters)
        return JobPage(records=records, total=total)

    # ---- output ----------------------------------------------------------------------------

    def output_path(self, record: JobRecord, stream: Stream) -> str:
        """Where the job's `stream` goes: its path, taken relative to the job's directory."""
        paths = record.paths
        path = (paths.stdout_path if stream == "stdout" else paths.stderr_path) or ""
        return path if path.startswith("/") else posixpath.join(job_directory(record), path)

    def read_output(
        self,
        *,
        owner: str,
        job_id: str,
        stream: Stream = "stdout",
        tail: int | None = None,
        head: int | None = None,
        offset: int = 0,
        length: int | None = None,
    ) -> str:
        """Part of a job's output: its last or first bytes, or a byte range.

        Read like every file the user reads (`files`): only where the user may read, links
        never followed out; UTF-8, leniently.
        """
        record = self.get(owner=owner, job_id=job_id)
        path = self.output_path(record, stream)
        files = self.job_files.job_files(record)
        made = None if record.named_directory else record.paths.directory
        try:
            result = files.request(
                path, "range", job_folder=made, tail=tail, head=head, offset=offset, length=length
            )
        except FileRefusedError as error:
            raise OutputUnavailableError(
                f"{stream} of job {job_id} cannot be read at {path}: {error.of_the_path()}"
            ) from None
        return decode_part(result).text
