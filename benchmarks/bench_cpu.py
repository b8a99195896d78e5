"""CPU per request, per operation, in process: the gateway's own work, no network, no load
generator.

Builds the app with `create_app(settings)` (its start-up run as `serve` runs it, no poller),
records JOBS jobs on the built-in `local` resource (`/bin/true`, launched through the API),
then calls the ASGI app directly with a minimal client, ROUNDS times per operation, and
divides the process's CPU time (`time.process_time()`: every thread of this process, the
children a launch starts not counted) by the requests. Operations: the IRI mix (getJob,
getJobs as a page of 100 jobs, getResources, `ls` of a job's folder) and launchJob (fewer
rounds: each starts a process). Every answer is checked to be a 200.

With `--database-url` (a PostgreSQL server whose role may create databases) the store is a
fresh database made on that server for the run, dropped after it. With `--compare DIR`
the same measurement is also run in a child process with DIR (an export of another
commit, e.g. `git archive main | tar -x -C DIR`) first on `PYTHONPATH`, and both are printed
side by side. `--profile OP` prints the top functions for one operation instead (yappi,
every thread: where the time goes, by stage).

    .venv/bin/python benchmarks/bench_cpu.py --rounds 3000
    .venv/bin/python benchmarks/bench_cpu.py --compare /tmp/iri-main \\
        --database-url postgresql://iri_test:iri_test@127.0.0.1:55432/iri_test

Budgets (issue 25): getJob <= 1 ms, getJobs page <= 2 ms, launchJob <= 3 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ASGI = Callable[..., Awaitable[None]]
BUDGET_MS = {"getJob": 1.0, "getJobs": 2.0, "launchJob": 3.0}


async def call(
    app: ASGI, token: str, method: str, path: str, query: str = "", body: Any = None
) -> tuple[int, bytes]:
    """One request through the ASGI app: (status, body)."""
    data = b"" if body is None else json.dumps(body).encode()
    headers = [(b"host", b"bench"), (b"authorization", f"Bearer {token}".encode())]
    if body is not None:
        headers += [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 40000),
        "server": ("bench", 80),
        "state": {},
    }
    sent = False
    status = 0
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            await asyncio.sleep(3600)
        sent = True
        return {"type": "http.request", "body": data, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(chunks)


def job_spec(index: int) -> dict[str, Any]:
    return {
        "executable": "/bin/true",
        "arguments": [str(index)],
        "name": f"bench-{index}",
        "environment": {"BENCH": "1"},
        "attributes": {"account": "proj1", "duration": 600},
    }


async def measure(args: argparse.Namespace) -> dict[str, float]:
    from _common import fresh_database

    from iri_gateway.service.operations.settings import Settings

    data = Path(tempfile.mkdtemp(prefix="bench-cpu-"))
    extra: dict[str, Any] = {"read_rate": 1e6, "write_rate": 1e6}
    with ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, data, ignore_errors=True)
        if args.database_url:
            from iri_gateway.service.operations.database import normalise_url

            server = normalise_url(args.database_url)
            extra["database_url"], _, _ = cleanup.enter_context(fresh_database(server))
        return await _measure(args, Settings(data_dir=data, **extra))


async def _measure(args: argparse.Namespace, settings: Any) -> dict[str, float]:
    from iri_gateway.api.app import create_app

    app = create_app(settings, run_poller=False)
    try:  # what `serve` does after building the app, in the code that has it
        from iri_gateway.cli.serving import freeze_start_up
    except ImportError:  # an older gateway: its serve froze nothing
        pass
    else:
        freeze_start_up()
    token = app.state.tokens.issue("bench", ["proj1"])
    results: dict[str, float] = {}
    async with app.router.lifespan_context(app):
        ids, folders = [], []
        for index in range(args.jobs):
            status, body = await call(
                app, token, "POST", "/api/v2/compute/job/local", body=job_spec(index)
            )
            assert status == 200, (status, body[:300])
            job = json.loads(body)
            ids.append(job["id"])
            folders.append(job["status"]["meta_data"]["directory"])
        rounds = {
            "getJob": lambda i: (
                "GET",
                f"/api/v2/compute/status/local/{ids[i % len(ids)]}",
                "",
                None,
            ),
            "getJobs": lambda i: (
                "POST",
                "/api/v2/compute/status/local",
                "limit=100&historical=true",
                None,
            ),
            "getResources": lambda i: ("GET", "/api/v2/status/resources", "", None),
            "ls": lambda i: (
                "POST",
                "/api/v2/filesystem/ls/local",
                "",
                {"path": folders[i % len(folders)]},
            ),
            "launchJob": lambda i: ("POST", "/api/v2/compute/job/local", "", job_spec(10_000 + i)),
        }
        for name, request in rounds.items():
            if args.profile and name != args.profile:
                continue
            count = args.launches if name == "launchJob" else args.rounds
            for i in range(min(count, 20)):  # warm-up: imports, caches, pools
                await call(app, token, *request(i + count))
            if args.profile:
                _profile_start()
            started = time.process_time()
            for i in range(count):
                status, body = await call(app, token, *request(i))
                assert status == 200, (name, status, body[:300])
            spent = time.process_time() - started
            if args.profile:
                _profile_print(count, args.top)
            results[name] = spent / count * 1000
    return results


def _profile_start() -> None:
    """yappi (`pip install yappi`: not a dependency), CPU clock, every thread: the sync
    routes run on the thread pool, where cProfile does not look."""
    import yappi

    yappi.set_clock_type("cpu")
    yappi.start()


def _profile_print(count: int, top: int) -> None:
    """The `top` functions by total time, in ms per request (total, own)."""
    import yappi

    yappi.stop()
    stats = yappi.get_func_stats()
    stats.sort(os.environ.get("BENCH_SORT", "ttot"), "desc")
    print(f"{'ms total':>9}{'ms own':>9}{'calls':>9}  function")
    for stat in list(stats)[:top]:
        where = f"{Path(stat.module).name}:{stat.lineno} {stat.name}"
        print(
            f"{stat.ttot * 1000 / count:9.3f}{stat.tsub * 1000 / count:9.3f}"
            f"{stat.ncall:9d}  {where}"
        )
    yappi.clear_stats()


def compare(directory: str, argv: list[str]) -> dict[str, float]:
    """The same measurement in a child process importing the package from `directory`."""
    environment = dict(
        os.environ, PYTHONPATH=os.pathsep.join([directory, os.environ.get("PYTHONPATH", "")])
    )
    output = subprocess.run(
        [sys.executable, __file__, "--json", *argv],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    figures: dict[str, float] = json.loads(output.strip().splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3000, help="requests per read operation")
    parser.add_argument("--launches", type=int, default=200, help="launchJob requests")
    parser.add_argument("--jobs", type=int, default=120, help="jobs recorded first")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--compare", default=None, help="an export of another commit")
    parser.add_argument("--profile", default=None, help="cProfile one operation")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    forwarded = [f"--rounds={args.rounds}", f"--launches={args.launches}", f"--jobs={args.jobs}"]
    if args.database_url:
        forwarded.append(f"--database-url={args.database_url}")
    before = compare(args.compare, forwarded) if args.compare else None
    after = asyncio.run(measure(args))
    if args.json:
        print(json.dumps(after))
        return
    if args.profile:
        return
    print(f"{'operation':<14}{'ms CPU/request':>16}{'before':>10}{'budget':>8}")
    for name, ms in after.items():
        was = f"{before[name]:.3f}" if before and name in before else ""
        budget = f"{BUDGET_MS[name]:g}" if name in BUDGET_MS else ""
        print(f"{name:<14}{ms:>16.3f}{was:>10}{budget:>8}")


if __name__ == "__main__":
    main()
