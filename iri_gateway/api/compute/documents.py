"""The encoded status documents of recently shown jobs, so that a page of jobs that did not
change is answered without decoding and encoding each job again.

A getJobs page of 100 jobs decoded each job's stored plan, effective spec and history and
encoded the document again on every request: most of the page's CPU (docs/benchmarks.md,
"The IRI requirements"). A job's status document (`job_document` without the spec) is made
only from its state, time, message, exit code, native id, resource and the JSON texts of its
history, effective spec, members, elements and plan as the database returned them; an entry is used
only when all of those are equal, compared exactly, to the record being shown. So a
document is never stale, on one process or several sharing a database: any change of the
job changes a compared value (the texts themselves, not a version number that a frozen
clock or a write that forgot it could leave unchanged). Records whose texts are not known
(given decoded) are encoded each time, never cached.

Bounded (least recently shown first out), shared by the process's threads. The cache holds
documents of jobs the callers were allowed to see; a job is only ever looked up after the
store read it for its owner, so it cannot show one user another's job.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from iri_gateway.service.operations.store import JobRecord

DOCUMENTS = 4096
"""Status documents kept: a few pages of every active user; some 2-4 KiB each (the texts
compared and the document), so about 10-16 MiB at most."""

_TEXTS = ("history", "effective_spec", "members", "elements", "plan")
"""The stored JSON texts a status document is made from (`job_document` without the spec)."""


def _key(record: JobRecord) -> tuple[Any, ...] | None:
    texts = [record.stored.text(name) for name in _TEXTS]
    if any(text is None for text in texts):
        return None
    return (
        record.state,
        record.updated_at,
        record.message,
        record.exit_code,
        record.native_id,
        record.resource_id,
        *texts,
    )


class JobDocuments:
    """Encoded status documents by job id, each with the values it was made from."""

    def __init__(self, encode: Callable[[JobRecord], bytes], capacity: int = DOCUMENTS) -> None:
        """`encode`: a record's status document as JSON bytes (the spec left out)."""
        self._encode = encode
        self._capacity = capacity
        self._entries: OrderedDict[str, tuple[tuple[Any, ...], bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def encoded(self, record: JobRecord) -> bytes:
        """`record`'s status document as JSON bytes: the kept one when it was made from
        exactly these values, else encoded now (and kept, when the texts are known)."""
        key = _key(record)
        if key is None:
            return self._encode(record)
        with self._lock:
            entry = self._entries.get(record.id)
            if entry is not None and entry[0] == key:
                self._entries.move_to_end(record.id)
                return entry[1]
        body = self._encode(record)
        with self._lock:
            self._entries[record.id] = (key, body)
            self._entries.move_to_end(record.id)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)
        return body

    def __len__(self) -> int:
        return len(self._entries)
