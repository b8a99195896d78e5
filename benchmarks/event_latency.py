"""How fast a client learns of a job's change: the event stream against polling getJob at the
SDK's default interval, and how many streams one replica holds with how much memory (issue 28).

Why: the stream exists so that a client hears of a change at once without asking again and
again; this measures both halves of that claim on a real `iri-gateway serve`.

Part 1, latency (`--jobs` jobs, one after another). Each job's script stamps the moment it
starts and the moment it ends (`date +%s.%N` into a file of the run's folder): those are the
scheduler's changes to `active` and `completed` as the job itself saw them. For each job:

- a stream client (`GET /api/v2/compute/events?job_id=...`, opened before the launch) notes
  when each event arrives;
- a polling client does what the SDK's `wait()` does today: getJob every 0.2 s, the interval
  growing 1.5x up to 5 s (`client/sync_client.py` `wait` defaults), noting when it first saw
  each state, and counting its requests.

Printed, per state (`active`, `completed`): p50/p99 of "client knew - job's own stamp" for
both clients; for the stream also "arrival - the event's `time`" (the push path alone, from
the moment the gateway's poller recorded the change); and getJob requests per job. The
scheduler-to-gateway part (the gateway's poller) is the same for both clients.

Part 2, subscribers (`--subscribers N`): N streams of one user opened on the replica (raw
asyncio HTTP/1.1 connections, light on the client side), the serve's RSS (VmRSS from /proc)
before and after, per stream; then one job launched, and p50/p99/max of "arrival - event
time" of its `completed` event over the N streams (the fan-out).

Runs on the built-in `local` resource by default (SQLite, no scheduler needed); `--cluster`
uses the test cluster's Slurm (`scripts/cluster start` first; never started or stopped
here). Numbers for docs/benchmarks.md only from a run on a quiet machine.

    .venv/bin/python benchmarks/event_latency.py --jobs 30 --subscribers 1000 [--cluster]
    ... --quick     # 3 jobs, 50 subscribers: checks the script, not the speed
"""

from __future__ import annotations

import argparse
import asyncio
import json
import queue
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.api.transfer_helpers import memory_kib  # noqa: E402
from tests.support.serve import issue_token, running_serve  # noqa: E402

API = "/api/v2"
SDK_POLL, SDK_GROWTH, SDK_MAX_POLL = 0.2, 1.5, 5.0
"""The SDK's `wait()` defaults: first interval, growth, longest interval."""
STATES = ("active", "completed")
"""The states whose moment the job itself stamps (its start, its end)."""


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


@dataclass
class Target:
    """The serve under test and what a client needs to talk to it."""

    url: str
    pid: int
    token: str
    resource: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "X-IRI-Facility-Project": "proj1"}


# --- part 1: one job, a stream and a poller ------------------------------------------------


class StreamClient:
    """One SSE stream read in a thread: (arrival time, event data) of each event."""

    def __init__(self, target: Target, params: dict[str, Any]) -> None:
        self.arrivals: queue.Queue[tuple[float, dict[str, Any]]] = queue.Queue()
        self.opened = threading.Event()
        self._client = httpx.Client(timeout=httpx.Timeout(30, read=120))
        self._thread = threading.Thread(target=self._read, args=(target, params), daemon=True)
        self._thread.start()
        if not self.opened.wait(30):
            raise SystemExit("the event stream did not answer within 30 s")

    def _read(self, target: Target, params: dict[str, Any]) -> None:
        try:
            with self._client.stream(
                "GET", f"{target.url}{API}/compute/events", headers=target.headers, params=params
            ) as answer:
                if answer.status_code != 200:
                    answer.read()
                    raise SystemExit(f"stream refused: {answer.status_code} {answer.text}")
                for line in answer.iter_lines():
                    if line.startswith("retry:"):
                        self.opened.set()
                    elif line.startswith("data:"):
                        self.arrivals.put((time.time(), json.loads(line[5:])))
        except httpx.HTTPError:
            pass
        finally:
            self.opened.set()

    def close(self) -> None:
        self._client.close()
        self._thread.join(timeout=10)


@dataclass
class JobRun:
    """What one job's run measured."""

    stamps: dict[str, float] = field(default_factory=dict)
    streamed: dict[str, float] = field(default_factory=dict)
    event_time: dict[str, float] = field(default_factory=dict)
    polled: dict[str, float] = field(default_factory=dict)
    requests: int = 0


def launch(target: Target, client: httpx.Client, script: str, name: str) -> str:
    answer = client.post(
        f"{target.url}{API}/compute/job/{target.resource}",
        json={
            "name": name,
            "executable": "/bin/sh",
            "arguments": ["-c", script],
            "attributes": {"duration": 120},
        },
        headers=target.headers,
    )
    if answer.status_code != 200:
        raise SystemExit(f"launchJob: {answer.status_code} {answer.text}")
    job_id: str = answer.json()["id"]
    return job_id


def poll_like_the_sdk(target: Target, job_id: str, run: JobRun, deadline: float) -> None:
    """getJob at the SDK's default intervals until the job is final; first sighting of each
    state."""
    interval = SDK_POLL
    with httpx.Client(timeout=30) as client:
        while time.time() < deadline:
            answer = client.get(
                f"{target.url}{API}/compute/status/{target.resource}/{job_id}",
                headers=target.headers,
            )
            seen = time.time()
            run.requests += 1
            if answer.status_code == 200:
                state = answer.json()["status"]["state"]
                run.polled.setdefault(state, seen)
                if state in ("completed", "failed", "canceled"):
                    return
            time.sleep(interval)
            interval = min(max(interval, SDK_POLL) * SDK_GROWTH, SDK_MAX_POLL)


def one_job(target: Target, folder: Path, seconds: float) -> JobRun:
    """Launch one job that stamps its start and end, watched by a stream and by a poller."""
    name = f"evlat-{uuid.uuid4().hex[:8]}"
    start, end = folder / f"{name}.start", folder / f"{name}.end"
    script = f"date +%s.%N > {start}; sleep {seconds}; date +%s.%N > {end}"
    run = JobRun()
    # The stream filters on nothing the launch returns yet: it keeps this user's events and
    # the job's are picked out by id below (a stream opened after the launch could miss `new`).
    stream = StreamClient(target, {})
    try:
        with httpx.Client(timeout=60) as client:
            job_id = launch(target, client, script, name)
        deadline = time.time() + seconds + 120
        poller = threading.Thread(
            target=poll_like_the_sdk, args=(target, job_id, run, deadline), daemon=True
        )
        poller.start()
        while time.time() < deadline:
            try:
                arrived, data = stream.arrivals.get(timeout=max(0.1, deadline - time.time()))
            except queue.Empty:
                break
            if data.get("job_id") != job_id or data.get("type") != "job":
                continue
            run.streamed.setdefault(data["state"], arrived)
            run.event_time.setdefault(data["state"], float(data["time"]))
            if data["state"] in ("completed", "failed", "canceled"):
                break
        poller.join(timeout=max(0.0, deadline - time.time()))
    finally:
        stream.close()
    for state, path in (("active", start), ("completed", end)):
        if path.exists():
            run.stamps[state] = float(path.read_text().strip())
    return run


def latency_part(target: Target, folder: Path, jobs: int, seconds: float) -> list[str]:
    runs = [one_job(target, folder, seconds) for _ in range(jobs)]
    lines = [f"latency over {jobs} job(s) of {seconds} s each on `{target.resource}`:"]
    for state in STATES:
        pairs = [r for r in runs if state in r.stamps]
        streamed = [
            (r.streamed[state] - r.stamps[state]) * 1000 for r in pairs if state in r.streamed
        ]
        polled = [(r.polled[state] - r.stamps[state]) * 1000 for r in pairs if state in r.polled]
        pushed = [
            (r.streamed[state] - r.event_time[state]) * 1000
            for r in runs
            if state in r.streamed and state in r.event_time
        ]
        for label, values in (
            ("stream, job's stamp -> client", streamed),
            ("getJob polling, job's stamp -> client", polled),
            ("stream, event time -> client", pushed),
        ):
            if values:
                lines.append(
                    f"  {state:<10} {label:<40} n={len(values):3d} p50 "
                    f"{percentile(values, 0.5):8.1f} ms  p99 {percentile(values, 0.99):8.1f} ms"
                )
            else:
                lines.append(f"  {state:<10} {label:<40} n=  0 (state not seen)")
    missed = sum(1 for r in runs for s in STATES if s in r.polled and s not in r.streamed)
    requests = [r.requests for r in runs]
    lines.append(
        f"  getJob requests per job while polling: mean {sum(requests) / len(requests):.1f}, "
        f"max {max(requests)}; the stream: 1 request per client, whatever the jobs"
    )
    lines.append(f"  states polling saw that the stream did not: {missed}")
    return lines


# --- part 2: many subscribers ----------------------------------------------------------------


class Fan:
    """N raw HTTP/1.1 SSE connections of one user, each ending at its first `completed`
    event; when each opened and when the event came (with the event's own time)."""

    def __init__(self, target: Target, count: int) -> None:
        url = httpx.URL(target.url)
        self.host, self.port = url.host, url.port or 80
        self.token, self.count = target.token, count
        self.opened = 0
        self.all_open = asyncio.Event()
        self.delays: list[float] = []
        """Milliseconds from the event's `time` to its arrival, one per stream."""

    async def one(self) -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            writer.write(
                (
                    f"GET {API}/compute/events?state=completed HTTP/1.1\r\nHost: {self.host}"
                    f"\r\nAuthorization: Bearer {self.token}\r\n"
                    "Accept: text/event-stream\r\n\r\n"
                ).encode()
            )
            await writer.drain()
            status = await reader.readline()
            if b" 200 " not in status:
                raise SystemExit(f"a subscriber was refused: {status!r}")
            while line := await reader.readline():
                if line.startswith(b"retry:"):
                    self.opened += 1
                    if self.opened == self.count:
                        self.all_open.set()
                elif line.startswith(b"data:"):
                    data = json.loads(line[5:])
                    self.delays.append((time.time() - float(data["time"])) * 1000)
                    return
        finally:
            writer.close()


async def subscribers_part(target: Target, count: int) -> list[str]:
    before = memory_kib(target.pid)["VmRSS"]
    fan = Fan(target, count)
    tasks = [asyncio.create_task(fan.one()) for _ in range(count)]
    started = time.monotonic()
    await asyncio.wait_for(fan.all_open.wait(), timeout=120)
    took = time.monotonic() - started
    await asyncio.sleep(1.0)  # the serve settles (buffers allocated, threads idle)
    during = memory_kib(target.pid)["VmRSS"]
    async with httpx.AsyncClient(timeout=60) as client:
        answer = await client.post(
            f"{target.url}{API}/compute/job/{target.resource}",
            json={"executable": "/bin/true", "attributes": {"duration": 60}},
            headers=target.headers,
        )
        if answer.status_code != 200:
            raise SystemExit(f"launchJob: {answer.status_code} {answer.text}")
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=300)
    await asyncio.sleep(1.0)
    after = memory_kib(target.pid)["VmRSS"]
    delays = fan.delays
    return [
        f"{count} subscribers (one user) on one replica: opened in {took:.1f} s",
        f"  serve RSS: {before / 1024:.1f} MiB before, {during / 1024:.1f} MiB with the "
        f"streams open (+{(during - before) / count:.1f} KiB per stream), "
        f"{after / 1024:.1f} MiB after they ended",
        f"  one `completed` event to all {len(delays)}: event time -> client p50 "
        f"{percentile(delays, 0.5):.1f} ms, p99 {percentile(delays, 0.99):.1f} ms, "
        f"max {max(delays):.1f} ms",
    ]


# --- set-up ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=2.0, help="each job's run time")
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--cluster", action="store_true", help="the test cluster's Slurm")
    parser.add_argument("--quick", action="store_true", help="3 jobs, 50 subscribers")
    options = parser.parse_args()
    if options.quick:
        options.jobs, options.subscribers, options.seconds = 3, 50, 1.0
    with tempfile.TemporaryDirectory(prefix="iri-event-latency-") as scratch:
        folder = Path(scratch)
        data = folder / "data"
        data.mkdir()
        args: tuple[str, ...] = ()
        resource = "local"
        if options.cluster:
            sys.path.insert(0, str(ROOT / "benchmarks"))
            from bench_launch import cluster_profile

            args = ("--profiles", str(cluster_profile(folder)))
            resource = "cluster"
        env = {
            "IRI_GATEWAY_EVENTS_STREAMS_PER_USER": str(options.subscribers + 10),
            "IRI_GATEWAY_EVENTS_STREAMS": str(options.subscribers + 10),
        }
        with running_serve(data, args=args, extra_env=env, stop_timeout=30) as served:
            token = issue_token(data, "alice", "proj1")
            target = Target(served.url, served.process.pid, token, resource)
            for line in latency_part(target, folder, options.jobs, options.seconds):
                print(line, flush=True)
            for line in asyncio.run(subscribers_part(target, options.subscribers)):
                print(line, flush=True)


if __name__ == "__main__":
    main()
