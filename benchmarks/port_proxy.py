"""The port proxy against connecting to the job's port directly, in the same run (issue 29).

A real `iri-gateway serve` (SQLite, the `local` resource, its proxy on `localhost` while its
API is on `127.0.0.1`) runs one job: tests/support/service_echo.py on its declared port
`http`. The same requests then go to the port directly (what a user on the compute node, or
with an SSH tunnel, would do) and through the proxy with the user's token (what a script
does; a browser's cookie costs the same check):

- latency: `--requests` small GETs one after another, p50 / p99 each way, and the added
  milliseconds;
- throughput: `--concurrency` clients for `--seconds`, requests per second each way, and the
  serve's CPU milliseconds per proxied request (the process tree, /proc);
- bulk: one GET of `--bytes` bytes, MB/s each way;
- WebSocket: `--messages` round trips of a 100-byte message, p50 / p99 each way;
- tunnel (`jobs forward`, the SDK's `forward_port`): the small GETs and the bulk GET again
  over a local port forwarded through the proxy's raw TCP tunnel, against direct.

    .venv/bin/python benchmarks/port_proxy.py --requests 500 --concurrency 8 --seconds 10

Publish figures from a quiet machine only: the script prints the machine's busy core-seconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchmarks._common import machine_busy, proc_times  # noqa: E402
from iri_gateway.client import GatewayClient  # noqa: E402
from tests.conftest import UNHURRIED, token_works  # noqa: E402
from tests.support.serve import free_port, issue_token, running_serve  # noqa: E402
from tests.support.websocket_client import WebSocketSession  # noqa: E402

ECHO = ROOT / "tests" / "support" / "service_echo.py"


def serve_cpu(pid: int) -> float:
    """The serve process's own CPU seconds (not the job's: the service is its own process)."""
    times = proc_times(pid)
    assert times is not None, "the serve process is gone"
    return times[0]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def timed(call: Callable[[], object], count: int) -> list[float]:
    times: list[float] = []
    for _ in range(count):
        began = time.perf_counter()
        call()
        times.append((time.perf_counter() - began) * 1000)
    return times


def throughput(url: str, headers: dict[str, str], clients: int, seconds: float) -> int:
    """Requests answered 200 by `clients` threads, each with its own connection pool, in
    `seconds`."""
    done = [0] * clients
    stop = time.monotonic() + seconds

    def run(index: int) -> None:
        with httpx.Client(headers=headers, timeout=30) as client:
            while time.monotonic() < stop:
                if client.get(url).status_code == 200:
                    done[index] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done)


def bulk(url: str, headers: dict[str, str]) -> float:
    """MB/s of one streamed GET."""
    began = time.perf_counter()
    size = 0
    with httpx.stream("GET", url, headers=headers, timeout=120) as answer:
        answer.raise_for_status()
        for chunk in answer.iter_raw(1 << 16):
            size += len(chunk)
    return size / (time.perf_counter() - began) / 1e6


def websocket_round_trips(url: str, headers: dict[str, str], count: int) -> list[float]:
    with WebSocketSession(url, headers=headers) as session:
        message = "x" * 100
        times: list[float] = []
        for _ in range(count):
            began = time.perf_counter()
            session.send(message)
            assert session.receive() == message
            times.append((time.perf_counter() - began) * 1000)
        return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--bytes", type=int, default=200_000_000)
    parser.add_argument("--messages", type=int, default=500)
    options = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="iri-port-proxy-bench-"))
    data = folder / "data"
    token = issue_token(data, "alice", "proj1")
    port = free_port()
    proxy = f"http://localhost:{port}"
    env = {
        **UNHURRIED,
        "IRI_GATEWAY_PROXY_URL": proxy,
        "IRI_GATEWAY_POLL_FAST": "0.2",
        "IRI_GATEWAY_LOG_LEVEL": "warning",
        "IRI_GATEWAY_PROXY_CONNECTIONS_PER_USER": "1000",
        "IRI_GATEWAY_PROXY_BYTES_PER_SECOND": str(10 * 2**30),
    }
    auth = {"Authorization": f"Bearer {token}", "X-IRI-Facility-Project": "proj1"}
    with running_serve(data, port=port, extra_env=env, ready=token_works(token)) as served:
        service_port = free_port()
        spec = {
            "executable": "/bin/bash",
            "arguments": [
                "-c",
                f'exec {sys.executable} {ECHO} --port "$IRI_PORT_HTTP" '
                '--prefix "$IRI_PROXY_PATH_HTTP"',
            ],
            "ports": {"http": service_port},
        }
        answer = httpx.post(
            f"{served.url}/api/v2/compute/job/local", json=spec, headers=auth, timeout=60
        )
        answer.raise_for_status()
        job_id = answer.json()["id"]
        path = f"/{job_id}/main/http/"
        direct = f"http://127.0.0.1:{service_port}{path}"
        proxied = f"{proxy}{path}"
        deadline = time.monotonic() + 60
        while httpx.get(proxied, headers=auth, timeout=10).status_code != 200:
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"the service did not answer through the proxy:\n{served.output()}"
                )
            time.sleep(0.3)
        busy_before, _ = machine_busy()
        rows: list[tuple[str, str, str, str]] = []

        with httpx.Client(timeout=30) as plain, httpx.Client(headers=auth, timeout=30) as user:
            lat_direct = timed(
                lambda: plain.get(f"{direct}ping").raise_for_status(), options.requests
            )
            lat_proxy = timed(
                lambda: user.get(f"{proxied}ping").raise_for_status(), options.requests
            )
        rows.append(
            (
                "small GET, p50 / p99 ms",
                f"{percentile(lat_direct, 0.5):.2f} / {percentile(lat_direct, 0.99):.2f}",
                f"{percentile(lat_proxy, 0.5):.2f} / {percentile(lat_proxy, 0.99):.2f}",
                f"+{percentile(lat_proxy, 0.5) - percentile(lat_direct, 0.5):.2f} ms (p50)",
            )
        )

        got_direct = throughput(f"{direct}ping", {}, options.concurrency, options.seconds)
        cpu_before = serve_cpu(served.process.pid)
        got_proxy = throughput(f"{proxied}ping", auth, options.concurrency, options.seconds)
        cpu = serve_cpu(served.process.pid) - cpu_before
        rows.append(
            (
                f"requests/s, {options.concurrency} clients",
                f"{got_direct / options.seconds:.0f}",
                f"{got_proxy / options.seconds:.0f}",
                f"x{got_proxy / max(got_direct, 1):.2f}; "
                f"serve CPU {cpu / max(got_proxy, 1) * 1000:.2f} ms/request",
            )
        )

        big = f"big?bytes={options.bytes}"
        mb_direct = bulk(f"{direct}{big}", {})
        mb_proxy = bulk(f"{proxied}{big}", auth)
        rows.append(
            (
                f"one GET of {options.bytes / 1e6:.0f} MB, MB/s",
                f"{mb_direct:.0f}",
                f"{mb_proxy:.0f}",
                f"x{mb_proxy / mb_direct:.2f}",
            )
        )

        ws_direct = websocket_round_trips(
            direct.replace("http://", "ws://") + "ws", {}, options.messages
        )
        ws_proxy = websocket_round_trips(
            proxied.replace("http://", "ws://") + "ws", auth, options.messages
        )
        rows.append(
            (
                "WebSocket round trip, p50 / p99 ms",
                f"{percentile(ws_direct, 0.5):.2f} / {percentile(ws_direct, 0.99):.2f}",
                f"{percentile(ws_proxy, 0.5):.2f} / {percentile(ws_proxy, 0.99):.2f}",
                f"+{statistics.median(ws_proxy) - statistics.median(ws_direct):.2f} ms (p50)",
            )
        )
        with GatewayClient(served.url, token) as client:
            forward = client.forward_port("local", job_id, "http").start()
        try:
            host, local = forward.address
            tunneled = f"http://{host}:{local}{path}"
            with httpx.Client(timeout=30) as plain:
                lat_direct = timed(
                    lambda: plain.get(f"{direct}ping").raise_for_status(), options.requests
                )
            with httpx.Client(timeout=30) as through:
                lat_tunnel = timed(
                    lambda: through.get(f"{tunneled}ping").raise_for_status(), options.requests
                )
            rows.append(
                (
                    "tunnel: small GET, p50 / p99 ms",
                    f"{percentile(lat_direct, 0.5):.2f} / {percentile(lat_direct, 0.99):.2f}",
                    f"{percentile(lat_tunnel, 0.5):.2f} / {percentile(lat_tunnel, 0.99):.2f}",
                    f"+{percentile(lat_tunnel, 0.5) - percentile(lat_direct, 0.5):.2f} ms (p50)",
                )
            )
            mb_tunnel = bulk(f"{tunneled}{big}", {})
            rows.append(
                (
                    f"tunnel: one GET of {options.bytes / 1e6:.0f} MB, MB/s",
                    f"{mb_direct:.0f}",
                    f"{mb_tunnel:.0f}",
                    f"x{mb_tunnel / mb_direct:.2f}",
                )
            )
        finally:
            forward.close()
        busy, _ = machine_busy()
        httpx.delete(f"{served.url}/api/v2/compute/cancel/local/{job_id}", headers=auth)

    print(f"{'':40} {'direct':>16} {'proxied':>16}  ratio / added")
    for name, first, second, note in rows:
        print(f"{name:40} {first:>16} {second:>16}  {note}")
    print(f"machine busy core-seconds during the run: {busy - busy_before:.1f}")


if __name__ == "__main__":
    main()
