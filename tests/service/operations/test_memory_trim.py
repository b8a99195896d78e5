"""Giving freed memory back (`service/operations/memory.py`): glibc's malloc_trim is found and
really returns freed heap pages on this (glibc) machine, the trimmer calls it on its own
thread until stopped, and a C library without it is said once, not failed on."""

from __future__ import annotations

import ctypes
import logging
import threading

import pytest

from iri_gateway.service.operations.memory import Trimmer, glibc_trim


def _rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc/self/status")


def test_malloc_trim_gives_freed_memory_back() -> None:
    """Memory a thread allocated in its own arena and freed stays resident until trimmed
    (what the soak measured): 64 MiB in small blocks, freed, then trimmed."""
    trim = glibc_trim()
    assert trim is not None, "this machine's C library is glibc: malloc_trim must be found"
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]

    def churn() -> None:
        blocks = [libc.malloc(4096) for _ in range(16384)]
        for block in blocks[:-1]:  # the last one pins the top of the heap: no auto-shrink
            libc.free(block)

    worker = threading.Thread(target=churn)
    worker.start()
    worker.join()
    before = _rss_kib()
    trim()
    after = _rss_kib()
    assert before - after > 32 * 1024, f"RssAnon {before} KiB before the trim, {after} after"


def test_the_trimmer_trims_until_stopped() -> None:
    calls = threading.Semaphore(0)
    trimmer = Trimmer(calls.release, every=0.01)
    trimmer.start()
    assert all(calls.acquire(timeout=10) for _ in range(3))
    trimmer.stop()
    done = trimmer.trims
    assert done >= 3
    threading.Event().wait(0.1)
    assert trimmer.trims == done  # no trim after stop


def test_without_malloc_trim_the_trimmer_says_so_and_does_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("iri_gateway.service.operations.memory.glibc_trim", lambda: None)
    trimmer = Trimmer()
    with caplog.at_level(logging.INFO, logger="iri_gateway.service.operations.memory"):
        trimmer.start()
    trimmer.stop()
    assert "no malloc_trim" in caplog.text
    assert trimmer.trims == 0
