"""Giving the memory that requests freed back to the system, so a serving process's size
follows what it holds, not the busiest moment of its past.

Measured (docs/benchmarks.md, "Memory under a soak"): under a steady mix the live Python
objects stay flat (about 10 MiB under tracemalloc) while the resident size grows some
4-16 MiB a minute. What grows is memory glibc's allocator keeps after it was freed: each of
the thread pool's threads allocates a page of jobs in its own arena, and an arena keeps its
free pages until told otherwise. glibc's `malloc_trim(0)` gives them back (8-11 MiB at a
time in that measurement); `Trimmer` calls it every `TRIM_EVERY` seconds on a thread of its
own. On a C library without `malloc_trim` (not glibc) there is nothing to call: `Trimmer`
says so once at start and does nothing, and the process keeps that library's own policy.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

TRIM_EVERY = 10.0
"""Seconds between two trims: each costs about a millisecond (a walk over the arenas), so
this is a thousandth of a core, and growth between two trims stays a few MiB."""


def glibc_trim() -> Callable[[], object] | None:
    """glibc's `malloc_trim(0)` as a callable, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    try:
        library = ctypes.CDLL(name)
        trim = library.malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


class Trimmer:
    """Calls `trim` every `every` seconds until stopped."""

    def __init__(
        self, trim: Callable[[], object] | None = None, *, every: float = TRIM_EVERY
    ) -> None:
        self._trim = trim if trim is not None else glibc_trim()
        self._every = every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.trims = 0
        """How many trims ran (for tests and diagnostics)."""

    def start(self) -> None:
        if self._trim is None:
            log.info("no malloc_trim in this C library: freed memory is left to its policy")
            return
        self._thread = threading.Thread(target=self._run, name="memory-trim", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        assert self._trim is not None
        while not self._stop.wait(self._every):
            self._trim()
            self.trims += 1

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
