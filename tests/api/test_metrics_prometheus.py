"""`GET /metrics` of real `iri-gateway serve` processes (issue 27, item 1).

- A real Prometheus server (Debian's package, started here) scrapes a real serve with the
  scrape token of `metrics_token_file` (`authorization: credentials_file:`, as
  docs/operations.md shows), and its query API returns the series: requests by operation,
  jobs by state, the scheduler's command latency, launches. The serve refuses a scrape
  without that token, and with a user's, and no token is in what it serves.
- `serve --workers 2` on PostgreSQL: one scrape adds up what both workers counted, and a
  worker killed with `kill -9` leaves its counts in and its live gauges out.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import Path

import httpx
from sqlalchemy import create_engine

from tests.cli.test_serve_workers import answering, wait_until, workers_if
from tests.support.prometheus import running_prometheus, samples, value, wait_for_value
from tests.support.serve import issue_token, running_serve

V2 = "/api/v2"


def test_a_real_prometheus_scrapes_a_real_serve(tmp_path: Path) -> None:
    data = tmp_path / "data"
    token = issue_token(data, "alice", "p1")
    scrape_token = tmp_path / "scrape-token"
    scrape_token.write_text(secrets.token_urlsafe(32) + "\n")
    env = {
        "IRI_GATEWAY_METRICS_ACCESS": "token",
        "IRI_GATEWAY_METRICS_TOKEN_FILE": str(scrape_token),
    }
    headers = {"Authorization": f"Bearer {token}", "X-IRI-Facility-Project": "p1"}
    with running_serve(data, extra_env=env) as served:
        launched = httpx.post(
            f"{served.url}{V2}/compute/job/local",
            json={"executable": "/bin/sh", "arguments": ["-c", "echo measured"]},
            headers=headers,
            timeout=30,
        )
        assert launched.status_code == 200, launched.text
        job_id = launched.json()["id"]
        wait_until(
            lambda: (
                httpx.get(
                    f"{served.url}{V2}/compute/status/local/{job_id}", headers=headers, timeout=10
                ).json()["status"]["state"]
                == "completed"
            ),
            60,
            "the job completed",
        )
        # refused without the scrape token, and with a user's token instead
        bare = httpx.get(f"{served.url}/metrics", timeout=10)
        assert bare.status_code == 401, bare.text
        assert bare.headers["content-type"].startswith("application/problem+json")
        assert "scrape token" in bare.json()["detail"]
        assert httpx.get(f"{served.url}/metrics", headers=headers, timeout=10).status_code == 401

        host_port = served.url.removeprefix("http://")
        with running_prometheus(
            tmp_path / "prometheus", target=host_port, credentials_file=scrape_token
        ) as prometheus:
            assert wait_for_value(prometheus, 'up{job="iri-gateway"} == 1') == 1
            launches = 'sum(iri_gateway_http_requests_total{operation="launchJob",status="200"})'
            assert wait_for_value(prometheus, launches) == 1
            status_reads = 'sum(iri_gateway_http_requests_total{operation="getJob"})'
            assert wait_for_value(prometheus, status_reads) >= 1
            completed = 'iri_gateway_jobs{resource="local",state="completed"}'
            assert wait_for_value(prometheus, completed) == 1
            submit = (
                'iri_gateway_scheduler_command_duration_seconds_count{resource="local",'
                'command="submit"}'
            )
            assert wait_for_value(prometheus, submit) == 1
            latency = (  # the median submit time, from the histogram's buckets
                "histogram_quantile(0.5, iri_gateway_scheduler_command_duration_seconds_bucket"
                '{resource="local",command="submit"})'
            )
            assert 0 < wait_for_value(prometheus, latency) <= 120
            assert wait_for_value(prometheus, 'iri_gateway_launches_total{resource="local"}') == 1
            ok = 'iri_gateway_submissions_total{resource="local",outcome="ok"}'
            assert wait_for_value(prometheus, ok) == 1
            assert wait_for_value(prometheus, "iri_gateway_store_up") == 1
            assert (
                wait_for_value(prometheus, "count(iri_gateway_replica_heartbeat_age_seconds)") == 1
            )
            # a job id is never a label value: the paths that carried it are one operation
            assert (
                wait_for_value(
                    prometheus,
                    f'count({{__name__=~"iri_gateway_.*",operation=~".*{job_id}.*"}}) or vector(0)',
                )
                == 0
            )

        exposition = httpx.get(
            f"{served.url}/metrics",
            headers={"Authorization": f"Bearer {scrape_token.read_text().strip()}"},
            timeout=10,
        ).text
        assert token not in exposition and scrape_token.read_text().strip() not in exposition
    assert token not in served.output()


def test_two_workers_add_up_in_one_scrape(tmp_path: Path, postgres_url: str) -> None:
    data = tmp_path / "data"
    env = {
        "IRI_GATEWAY_DATABASE_URL": postgres_url,
        "IRI_GATEWAY_METRICS_ACCESS": "open",
        "IRI_GATEWAY_DATABASE_POOL_SIZE": "3",
        "IRI_GATEWAY_POLL_SLOW": "2",
    }
    database = create_engine(postgres_url)
    try:
        with running_serve(data, args=("--workers", "2"), extra_env=env, workers=None) as served:
            serve_pid = served.process.pid
            first = wait_until(lambda: workers_if(database, serve_pid, 2), 60, "two workers")
            answered: dict[int, int] = {}

            def both_answered() -> bool:
                pid, _ = answering(served.url)  # /ready on a new connection
                answered[pid] = answered.get(pid, 0) + 1
                return len(answered) == 2

            wait_until(both_answered, 120, f"both workers {sorted(first)} answer /ready")
            assert set(answered) == set(first), (answered, first)
            scraped = samples(httpx.get(f"{served.url}/metrics", timeout=30).text)
            # each worker counted its own; one scrape shows their sum
            total = value(scraped, "iri_gateway_http_requests_total", operation="getReadiness")
            assert total == sum(answered.values()), (scraped, answered)
            assert max(answered.values()) < total
            # each worker's live pool size (3) counts once: two workers, 6
            assert value(scraped, "iri_gateway_database_pool_connections", state="size") == 6

            victim = sorted(first)[0]
            os.kill(victim, signal.SIGKILL)
            wait_until(
                lambda: workers_if(database, serve_pid, 2, gone=victim), 90, "worker replaced"
            )
            time.sleep(1)  # the new worker has sampled its pool at its start
            after = samples(httpx.get(f"{served.url}/metrics", timeout=30).text)
            # the killed worker's requests stay counted; its pool no longer does
            assert (
                value(after, "iri_gateway_http_requests_total", operation="getReadiness") >= total
            )
            assert value(after, "iri_gateway_database_pool_connections", state="size") == 6
    finally:
        database.dispose()
