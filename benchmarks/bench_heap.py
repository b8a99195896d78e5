"""Where a soak's memory growth is: Python objects, Python's allocator, or the C allocator.

Why: bench_soak.py sees serve's RSS grow under the IRI mix; this tells a leak (live Python
objects that accumulate) from memory the allocators keep after it was freed. The gateway
runs in this process (`create_app` served by uvicorn on a thread, SQLite store, the test
cluster's `cluster` resource with held jobs, as bench_iri.py), wrk sends the mix (or one
operation of it, `--only`), and every `--every` seconds it prints:

- RSS (VmRSS of this process);
- `traced`: the bytes of live Python allocations (tracemalloc, with `--tracemalloc`: slows
  serve several times; the growth of traced memory is what a leak of objects would show),
  and at the end the 15 source lines whose live allocations grew most;
- `pymalloc`: Python's own arenas (1 MiB each, `sys._debugmallocstats`; not with
  `--tracemalloc`) and the bytes in use in them: a count that keeps rising is
  fragmentation of Python's small-object heap;
- `SQLite`: the memory the SQLite library holds (`sqlite3_memory_used`: page caches);
- threads alive (the thread pool's workers come and go).

At the end, the RSS before and after glibc's `malloc_trim(0)`: what the C allocator held
free but had not given back. `--trim-every N` trims every N seconds during the run, to see
whether what remains is flat.

    SLURM_CONF=/tmp/iri-cluster/slurm.conf .venv/bin/python benchmarks/bench_heap.py \\
        --seconds 120 [--only getJobs] [--tracemalloc] [--trim-every 10]
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import os
import re
import sys
import tempfile
import threading
import time
import tracemalloc

import bench_iri
import uvicorn
from _common import cluster_run, rss_bytes
from bench_iri import UNHURRIED, Target, seed, start_wrk, tokens, wrk_result

from iri_gateway.api.app import create_app
from iri_gateway.service.operations.settings import Settings
from tests.support.serve import free_port

MIB = 1024 * 1024
SHARES = {  # cumulative thresholds of the mix's Lua script: getJob, getJobs, getResources
    "mix": (50, 70, 90),
    "getJob": (100, 100, 100),
    "getJobs": (0, 100, 100),
    "getResources": (0, 0, 100),
    "ls": (0, 0, 0),
}


def one_operation(name: str) -> str:
    """bench_iri's Lua script with the shares of `name` (a single operation, or the mix)."""
    first, second, third = SHARES[name]
    return (
        bench_iri.MIX_LUA.replace("r <= 50", f"r <= {first}")
        .replace("r <= 70", f"r <= {second}")
        .replace("r <= 90", f"r <= {third}")
    )


def pymalloc() -> tuple[int, int]:
    """(arenas allocated now, bytes in allocated blocks) of Python's small-object allocator,
    parsed from `sys._debugmallocstats()` (which writes to the C-level standard error, and
    nothing while tracemalloc wraps the allocator: then -1, -1)."""
    with tempfile.TemporaryFile() as sink:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        text = sink.read().decode(errors="replace")
    arenas = re.search(r"# arenas allocated current\s*=\s*([\d,]+)", text)
    used = re.search(r"# bytes in allocated blocks\s*=\s*([\d,]+)", text)
    return (
        int(arenas.group(1).replace(",", "")) if arenas else -1,
        int(used.group(1).replace(",", "")) if used else -1,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="after 10 s of warm-up")
    parser.add_argument("--only", choices=sorted(SHARES), default="mix")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between lines")
    parser.add_argument("--tracemalloc", action="store_true", help="trace live allocations")
    parser.add_argument("--trim-every", type=float, default=0.0, help="malloc_trim period")
    parser.add_argument("--jobs", type=int, default=100)
    args = parser.parse_args()
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    if not hasattr(libc, "malloc_trim"):
        raise SystemExit("this C library has no malloc_trim (not glibc): nothing to compare")
    sqlite = ctypes.CDLL(ctypes.util.find_library("sqlite3"))
    sqlite.sqlite3_memory_used.restype = ctypes.c_int64
    bench_iri.MIX_LUA = one_operation(args.only)
    os.environ.update(UNHURRIED)
    if args.tracemalloc:
        tracemalloc.start(1)
    pid = os.getpid()
    with cluster_run("bench-heap") as (folder, profile, run, names):
        data = folder / "data"
        data.mkdir()
        users = tokens(data, {})
        app = create_app(Settings(profiles=[profile], data_dir=data))  # type: ignore[call-arg]
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning")
        )
        thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.1)
        url = f"http://127.0.0.1:{server.config.port}"
        target = Target([(url, pid)], users, data)
        names.append(f"{run}-heap")
        seed(target, args.jobs, names[-1])
        load = argparse.Namespace(threads=2, connections=20, page=100)

        def line(label: str) -> None:
            arenas, used = pymalloc()
            traced = tracemalloc.get_traced_memory()[0] / MIB if args.tracemalloc else 0.0
            small = f"{arenas} arenas, {used / MIB:5.1f} MiB used" if arenas >= 0 else "n/a"
            held = sqlite.sqlite3_memory_used() / MIB
            print(
                f"{label:>14}  RSS {rss_bytes([pid]) / MIB:7.1f} MiB  traced {traced:6.1f} MiB  "
                f"pymalloc {small}  SQLite {held:4.1f} MiB  threads {threading.active_count()}",
                flush=True,
            )

        try:
            warm = wrk_result("warm-up", start_wrk(target, load, 10), 10)
            gc.collect()
            line("after warm-up")
            before = tracemalloc.take_snapshot() if args.tracemalloc else None
            wrk = start_wrk(target, load, args.seconds)
            start = last_trim = time.monotonic()
            while wrk.poll() is None:
                time.sleep(args.every)
                if args.trim_every and time.monotonic() - last_trim >= args.trim_every:
                    libc.malloc_trim(0)
                    last_trim = time.monotonic()
                line(f"{time.monotonic() - start:.0f} s")
            mix = wrk_result(args.only, wrk, args.seconds)
            gc.collect()
            line("end, gc'd")
            libc.malloc_trim(0)
            line("malloc_trim(0)")
            faults = warm.faults() + mix.faults()
            print(f"{mix.requests} requests ({mix.rate:.0f}/s); faults: {faults or 'none'}")
            if before is not None:
                for stat in tracemalloc.take_snapshot().compare_to(before, "lineno")[:15]:
                    print(f"  {stat}")
        finally:
            server.should_exit = True
            thread.join(30)


if __name__ == "__main__":
    main()
