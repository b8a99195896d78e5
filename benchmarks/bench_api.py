"""getJob under concurrent load: a real `iri-gateway serve` (uvicorn), 64 clients, loopback.

Starts the server in a temp data directory (pinned to one core), submits one job on the
`local` resource, then drives GET /api/v2/compute/status/local/{id} with `wrk` (Debian
package `wrk`, on the other core) holding CLIENTS connections for SECONDS, and prints wrk's
requests/s and latency distribution. (An httpx/asyncio load generator saturates its own
core near 150 requests/s here, so it would measure itself, not the server.) Status comes
from the store, never from the scheduler, so this measures the API path.

    apt-get install wrk; python benchmarks/bench_api.py --clients 64 --seconds 10

Target (issue #4): >= 1,500 requests/s with p99 < 50 ms on the 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import httpx


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        port = free_port()
        token = subprocess.run(
            [
                sys.executable,
                "-m",
                "iri_gateway",
                "token",
                "bench",
                "--project",
                "p",
                "--data-dir",
                data,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        server = subprocess.Popen(
            [sys.executable, "-m", "iri_gateway", "serve", "--port", str(port), "--data-dir", data],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(server.pid, {0})
        base = f"http://127.0.0.1:{port}/api/v2"
        headers = {"Authorization": f"Bearer {token}"}
        try:
            for _ in range(100):
                try:
                    httpx.get(f"{base}/compute/capabilities/local", headers=headers)
                    break
                except httpx.TransportError:
                    time.sleep(0.1)
            job = httpx.post(
                f"{base}/compute/job/local",
                headers={**headers, "X-IRI-Facility-Project": "p"},
                json={"executable": "/bin/true"},
            ).json()
            url = f"{base}/compute/status/local/{job['id']}"
            wrk = shutil.which("wrk")
            if wrk is None:
                raise SystemExit("wrk is not installed: apt-get install wrk")
            report = subprocess.run(
                [
                    "taskset",
                    "-c",
                    str(1 % (os.cpu_count() or 1)),
                    wrk,
                    "-t1",
                    f"-c{args.clients}",
                    f"-d{args.seconds:g}s",
                    "--latency",
                    "-H",
                    f"Authorization: Bearer {token}",
                    url,
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        finally:
            server.terminate()
            server.wait(timeout=10)
    print(report)
    print("target: >= 1,500 requests/s with p99 < 50 ms")


if __name__ == "__main__":
    main()
