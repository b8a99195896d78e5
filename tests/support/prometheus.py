"""A real Prometheus server (Debian's `prometheus` package), started by a test and stopped
after it: its own configuration and storage in a temporary folder, on a free port of
127.0.0.1, scraping the targets the test names every second. Debian's own service is never
used. Missing program: the test fails saying how to install it (scripts/test-all does).
Also the reading of an exposition (`samples`, `value`) the metrics tests share."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.serve import free_port


def prometheus_program() -> str:
    return _program("prometheus")


def promtool_program() -> str:
    return _program("promtool")


def _program(name: str) -> str:
    found = shutil.which(name)
    assert found, f"no `{name}` on PATH: `apt-get install prometheus` (scripts/test-all does)"
    return found


@contextmanager
def running_prometheus(
    folder: Path, *, target: str, credentials_file: Path | None = None
) -> Iterator[str]:
    """Prometheus scraping `target` (host:port, path /metrics) every second, with the bearer
    token of `credentials_file` if given; yields its base URL."""
    folder.mkdir(parents=True, exist_ok=True)
    job: dict[str, Any] = {
        "job_name": "iri-gateway",
        "scrape_interval": "1s",
        "scrape_timeout": "1s",
        "metrics_path": "/metrics",
        "static_configs": [{"targets": [target]}],
    }
    if credentials_file is not None:
        job["authorization"] = {"type": "Bearer", "credentials_file": str(credentials_file)}
    config = folder / "prometheus.yml"  # JSON is YAML
    config.write_text(json.dumps({"global": {"scrape_interval": "1s"}, "scrape_configs": [job]}))
    port = free_port()
    log = folder / "prometheus.log"
    with log.open("wb") as stream:
        process = subprocess.Popen(
            [
                prometheus_program(),
                f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=stream,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _ready(url):
            assert process.poll() is None, f"prometheus exited: {log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"prometheus not ready: {log.read_text()[-4000:]}"
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=20)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def query(url: str, promql: str) -> list[dict[str, Any]]:
    """The result vector of an instant query through Prometheus' HTTP API."""
    answer = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=10)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def wait_for_value(url: str, promql: str, timeout: float = 60) -> float:
    """The value of the one-element vector `promql` once Prometheus has it (asked again
    until then, within `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        result = query(url, promql)
        if len(result) == 1:
            return float(result[0]["value"][1])
        assert len(result) == 0, f"{promql}: more than one series: {result}"
        assert time.monotonic() < deadline, f"{promql}: no series in {timeout} s"
        time.sleep(0.5)


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
"""An exposition's samples by name and labels."""


def samples(text: str) -> Samples:
    """Every sample of an exposition (the Prometheus text format), by name and labels."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float:
    """The sum of the samples named `name` whose labels include `labels`."""
    return sum(
        v for (n, have), v in found.items() if n == name and set(labels.items()) <= set(have)
    )
