"""The SDK's `wait()` load on the server, polling against the event stream, in the same run.

A real `iri-gateway serve` (SQLite store, the `local` resource) runs `--jobs` jobs of
`sleep --seconds`, `--parallel` at a time, each waited for by its own thread with the SDK's
`GatewayClient.wait`: first every job waited for by polling (`use_events=False`, the SDK's
intervals, 0.2 s growing to 5 s), then every job waited for on the stream. For each way:
requests per job (counted by the client, every request the waits sent: getJob reads and
stream connections; the submissions are left out, the same for both), the server's CPU
milliseconds per job (the serve process and its children, from /proc, over the whole phase:
each job is submitted right before its wait, so a phase's CPU holds its submissions and
runs too, the same for both ways; the difference is the waiting), and the median delay
from a job's end (its final status time) to `wait()` returning.

    .venv/bin/python benchmarks/wait_load.py --jobs 40 --parallel 8 --seconds 3

A server without the stream (before issue 28) measures polling only and says so. The
machine's other load changes the CPU figures: the script prints the machine's busy
core-seconds beside them; publish numbers only from a quiet machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import machine_busy, tree_times  # noqa: E402
from iri_gateway.client import GatewayClient  # noqa: E402
from tests.conftest import UNHURRIED, token_works  # noqa: E402
from tests.support.serve import issue_token, running_serve  # noqa: E402


class Counter:
    """Every request a client sent (an httpx event hook), by kind."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reads = 0
        self.streams = 0

    def hook(self, request: httpx.Request) -> None:
        with self.lock:
            if request.url.path.endswith("/compute/events"):
                self.streams += 1
            elif request.method == "GET" and "/compute/status/" in request.url.path:
                self.reads += 1


@contextmanager
def serve() -> Iterator[tuple[str, str, int]]:
    with tempfile.TemporaryDirectory(prefix="iri-wait-load-") as scratch:
        data = Path(scratch) / "data"
        data.mkdir()
        token = issue_token(data, "alice", "proj1")
        with running_serve(data, extra_env=UNHURRIED, ready=token_works(token)) as served:
            yield served.url, token, served.process.pid


def cpu(pid: int) -> float:
    return sum(own + children for own, children in tree_times(pid).values())


def one_job(url: str, token: str, seconds: float, use_events: bool, counter: Counter) -> float:
    spec = {
        "executable": "/bin/sleep",
        "arguments": [str(seconds)],
        "attributes": {"duration": 600},
    }
    with GatewayClient(url, token, timeout=60) as client:
        job = client.submit("local", spec, project="proj1")
        client._http.event_hooks["request"] = [counter.hook]
        done = client.wait("local", job.id, timeout=600, use_events=use_events)
        returned = time.time()
        client._http.event_hooks["request"] = []
    return returned - (done.time or returned)


def phase(
    args: argparse.Namespace, url: str, token: str, pid: int, events: bool
) -> dict[str, float]:
    counter = Counter()
    cpu_before, busy_before = cpu(pid), machine_busy()[0]
    started = time.monotonic()
    with ThreadPoolExecutor(args.parallel) as pool:
        delays = list(
            pool.map(lambda _: one_job(url, token, args.seconds, events, counter), range(args.jobs))
        )
    return {
        "reads per job": counter.reads / args.jobs,
        "stream connections per job": counter.streams / args.jobs,
        "requests per job": (counter.reads + counter.streams) / args.jobs,
        "server CPU ms per job": 1000 * (cpu(pid) - cpu_before) / args.jobs,
        "median end-to-return delay s": statistics.median(delays),
        "machine busy core-s": machine_busy()[0] - busy_before,
        "wall s": time.monotonic() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    with serve() as (url, token, pid):
        has_stream = _has_stream(url, token)
        results = {"polling": phase(args, url, token, pid, False)}
        if has_stream:
            results["stream"] = phase(args, url, token, pid, True)
        else:
            print("this server has no event stream: polling measured only")
    names = list(results)
    print(f"{args.jobs} jobs of {args.seconds:g} s, {args.parallel} at a time")
    print(f"{'':32}" + "".join(f"{name:>12}" for name in names))
    for key in results["polling"]:
        print(f"{key:32}" + "".join(f"{results[name][key]:>12.2f}" for name in names))


def _has_stream(url: str, token: str) -> bool:
    with (
        httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as http,
        http.stream("GET", "/api/v2/compute/events", timeout=httpx.Timeout(10, read=1)) as answer,
    ):
        return answer.status_code == 200


if __name__ == "__main__":
    main()
