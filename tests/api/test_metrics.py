"""`GET /metrics` as the setting `metrics_access` says, and what its request series carry
(issue 27, item 1); the real scrapes are tests/api/test_metrics_prometheus.py.

- `admin` (the default): 401 without a token, 403 for a user's, 200 for an admin's;
  `token`: only the scrape token of `metrics_token_file` (401 otherwise, even an admin's),
  a file that cannot be used stops the start; `open`: anyone; `off`: 404, nothing measured.
- A request is labelled by its operation id, never its path (no job id in a label); a path
  no route has is `unmatched`, a method nobody uses `other`; no token is ever in the text.
"""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from iri_gateway.api.app import create_app
from iri_gateway.api.status.metrics import MetricsTokenError
from iri_gateway.service.operations.metrics import Metrics, PrometheusMetrics
from iri_gateway.service.operations.settings import Settings
from tests.support.serve import CLI, clean_env

pytestmark = pytest.mark.anyio


def client_of(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def requests_counted(text: str) -> dict[tuple[str, str, str], float]:
    return {
        (s.labels["operation"], s.labels["method"], s.labels["status"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "iri_gateway_http_requests_total"
    }


async def test_admin_access_is_the_default(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path), run_poller=False)
    user = app.state.tokens.issue("alice", ["proj1"])
    admin = app.state.tokens.issue("root", admin=True)
    async with client_of(app) as client:
        bare = await client.get("/metrics")
        assert bare.status_code == 401
        assert bare.headers["content-type"].startswith("application/problem+json")
        refused = await client.get("/metrics", headers=bearer(user))
        assert refused.status_code == 403 and "facility admin" in refused.json()["detail"]
        served = await client.get("/metrics", headers=bearer(admin))
        assert served.status_code == 200
        assert served.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert user not in served.text and admin not in served.text
    counted = requests_counted(served.text)
    assert counted[("getMetrics", "GET", "401")] == 1
    assert counted[("getMetrics", "GET", "403")] == 1


async def test_token_access_takes_only_the_scrape_token(tmp_path: Path) -> None:
    scrape = secrets.token_urlsafe(24)
    token_file = tmp_path / "scrape-token"
    token_file.write_text(f"{scrape}\n")
    settings = Settings(
        data_dir=tmp_path / "data", metrics_access="token", metrics_token_file=token_file
    )
    app = create_app(settings, run_poller=False)
    admin = app.state.tokens.issue("root", admin=True)
    async with client_of(app) as client:
        for headers in ({}, bearer(admin), bearer(scrape[:-1]), bearer(scrape + "x")):
            refused = await client.get("/metrics", headers=headers)
            assert refused.status_code == 401, headers
            assert refused.headers["www-authenticate"] == "Bearer"
            assert "metrics_token_file" in refused.json()["detail"]
        served = await client.get("/metrics", headers=bearer(scrape))
        assert served.status_code == 200
        assert scrape not in served.text
        token_file.write_text("rotated\n")  # read at each scrape: replaced without a restart
        assert (await client.get("/metrics", headers=bearer(scrape))).status_code == 401
        assert (await client.get("/metrics", headers=bearer("rotated"))).status_code == 200
        token_file.unlink()
        gone = await client.get("/metrics", headers=bearer("rotated"))
        assert gone.status_code == 503 and "cannot be read" in gone.json()["detail"]


def test_token_access_needs_a_usable_token_file(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="metrics_token_file"):
        Settings(data_dir=tmp_path, metrics_access="token")
    for text in ("", "  \n", "two words\n"):
        (tmp_path / "token").write_text(text)
        settings = Settings(
            data_dir=tmp_path, metrics_access="token", metrics_token_file=tmp_path / "token"
        )
        with pytest.raises(MetricsTokenError, match="one token on one line"):
            create_app(settings, run_poller=False)
    missing = Settings(
        data_dir=tmp_path, metrics_access="token", metrics_token_file=tmp_path / "missing"
    )
    with pytest.raises(MetricsTokenError, match="cannot be read"):
        create_app(missing, run_poller=False)


async def test_open_and_off(tmp_path: Path) -> None:
    opened = create_app(Settings(data_dir=tmp_path / "a", metrics_access="open"), run_poller=False)
    assert isinstance(opened.state.metrics, PrometheusMetrics)
    off = create_app(Settings(data_dir=tmp_path / "b", metrics_access="off"), run_poller=False)
    assert type(off.state.metrics) is Metrics  # nothing measured
    async with client_of(opened) as client:
        assert (await client.get("/metrics")).status_code == 200
    async with client_of(off) as client:
        assert (await client.get("/metrics")).status_code == 404


async def test_requests_are_labelled_by_operation_never_by_path(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path, metrics_access="open"), run_poller=False)
    token = app.state.tokens.issue("alice", ["proj1"])
    headers = {**bearer(token), "X-IRI-Facility-Project": "proj1"}
    job_id = "0badc0de-0000-4000-8000-000000000000"
    async with client_of(app) as client:
        missing = await client.get(f"/api/v2/compute/status/local/{job_id}", headers=headers)
        assert missing.status_code == 404
        assert (await client.get(f"/no/such/{job_id}")).status_code == 404
        assert (await client.head("/health")).status_code == 200
        assert (await client.request("BREW", "/health")).status_code == 405
        text = (await client.get("/metrics")).text
    counted = requests_counted(text)
    assert counted[("getJob", "GET", "404")] == 1
    assert counted[("unmatched", "GET", "404")] == 1
    assert counted[("getLiveness", "GET", "200")] == 1  # a HEAD is served, and counted, as GET
    assert counted[("getLiveness", "other", "405")] == 1
    assert job_id not in text and token not in text


def test_serve_refuses_to_start_on_an_unreadable_token_file_in_one_line(tmp_path: Path) -> None:
    env = {
        **clean_env(),
        "IRI_GATEWAY_METRICS_ACCESS": "token",
        "IRI_GATEWAY_METRICS_TOKEN_FILE": str(tmp_path / "missing"),
    }
    # checked once by `serve`, before any worker starts or any database is opened
    unreachable = "postgresql://nobody@127.0.0.1:1/none"
    for extra in ([], ["--workers", "2", "--database-url", unreachable]):
        started = subprocess.run(
            [*CLI, "serve", "--data-dir", str(tmp_path / "data"), "--port", "1", *extra],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert started.returncode == 1, started.stderr
        assert "metrics_token_file" in started.stderr and "cannot be read" in started.stderr
        assert "Traceback" not in started.stderr
