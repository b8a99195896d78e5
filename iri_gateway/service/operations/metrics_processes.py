"""prometheus_client's multiprocess mode for `serve --workers N`: one directory per `serve`.

Why: with several workers a scrape reaches one of them, yet must count every worker's
requests. prometheus_client then keeps each process's values in files of one directory
(`PROMETHEUS_MULTIPROC_DIR`) and the scraped worker adds them up. The variable must be in
a worker's environment before the worker imports prometheus_client (the value class is
chosen at import), so `serve` makes the directory, empty, and puts it in the environment it
hands its workers (`workers_directory`), and removes it when they have stopped.

A worker that ends is marked dead (`mark_process_dead`): its live gauges (pools, queue) no
longer count, while its counters and histograms still do (requests it answered stay
answered). A worker that stops cleanly marks itself (`process_ended`); one killed is marked
at the next scrape (`forget_ended`), its process being gone from this host.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus_client's name for the directory of the processes' files."""

_LIVE_FILE = re.compile(r"^gauge_live\w+?_(\d+)\.db$")


def multiprocess_directory() -> Path | None:
    """The directory of this `serve`'s workers, None when this process serves alone."""
    named = os.environ.get(VARIABLE)
    return Path(named) if named else None


@contextmanager
def workers_directory() -> Iterator[Path]:
    """A new, empty directory for the workers' files, named in `os.environ` (which the
    workers inherit) while they run; removed afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="iri-gateway-metrics-"))
    earlier = os.environ.get(VARIABLE)
    os.environ[VARIABLE] = str(directory)
    try:
        yield directory
    finally:
        if earlier is None:
            os.environ.pop(VARIABLE, None)
        else:
            os.environ[VARIABLE] = earlier
        shutil.rmtree(directory, ignore_errors=True)


def process_ended(directory: Path, pid: int | None = None) -> None:
    """Take process `pid`'s (default: this one's) live gauges out of the sums."""
    from prometheus_client.multiprocess import mark_process_dead

    mark_process_dead(os.getpid() if pid is None else pid, str(directory))  # type: ignore[no-untyped-call]


def forget_ended(directory: Path) -> list[int]:
    """Mark dead every process with live gauge files that is no longer running (a worker
    killed and replaced); the pids marked."""
    pids = set()
    for path in directory.iterdir():
        found = _LIVE_FILE.match(path.name)
        if found:
            pids.add(int(found.group(1)))
    ended = sorted(pid for pid in pids if not _running(pid))
    for pid in ended:
        process_ended(directory, pid)
    return ended


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone's process: alive
    return True
