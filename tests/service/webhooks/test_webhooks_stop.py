"""A stopping gateway does not wait on its webhooks: their waking thread, which waits on the
event log's wake-ups WAKE_LOOK seconds at a time, is woken by the stop. Before, every stop
took up to that long, and a drain of 1 s (`drain_timeout`) overran it by 4-5 s
(tests/integration/test_drain_cluster.py)."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient

from iri_gateway.api.app import create_app
from iri_gateway.service.operations.settings import Settings
from iri_gateway.service.webhooks.service import WAKE_LOOK


def test_the_app_stops_without_waiting_for_the_webhooks_wake_up(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path), run_poller=True)
    with TestClient(app) as client:
        assert client.get("/ready").status_code == 200
        time.sleep(0.5)  # the waking thread is waiting now
        stopping = time.monotonic()
    took = time.monotonic() - stopping
    assert took < WAKE_LOOK / 2, f"the stop took {took:.2f} s"
