"""docs/operations.md "### Metrics" held to the truth: its table names exactly the series a
started gateway exposes, and its sample scrape configuration and alert rules are what
Prometheus' own `promtool` accepts (Debian's `prometheus` package, as scripts/test-all
installs it)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from iri_gateway.api.app import create_app
from iri_gateway.service.operations.settings import Settings
from tests.support.prometheus import promtool_program

PAGE = Path(__file__).resolve().parent.parent / "docs" / "operations.md"


def section() -> str:
    text = PAGE.read_text(encoding="utf-8")
    return text[text.index("### Metrics\n") : text.index("### Traces\n")]


def documented() -> dict[str, str]:
    """Metric name -> type, from the section's table."""
    rows = re.findall(r"^\| `(iri_gateway_\w+)` \| (\w+) \|", section(), flags=re.MULTILINE)
    return {name.removesuffix("_total") if kind == "counter" else name: kind for name, kind in rows}


def test_the_table_names_exactly_the_exposed_series(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path, metrics_access="open"), run_poller=False)
    with TestClient(app) as client:
        text = client.get("/metrics").text
    exposed = {  # the parser takes an unlabelled histogram's `_created` for a family
        family.name: family.type
        for family in text_string_to_metric_families(text)
        if not family.name.endswith("_created")
    }
    assert exposed == documented()


def test_the_scrape_configuration_and_alert_rules_pass_promtool(tmp_path: Path) -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", section(), flags=re.DOTALL)
    assert len(blocks) == 2, "a scrape configuration and the alert rules"
    token = tmp_path / "iri-gateway.token"
    token.write_text("scrape-token\n")
    config = tmp_path / "prometheus.yml"
    config.write_text(blocks[0].replace("/etc/prometheus/iri-gateway.token", str(token)))
    rules = tmp_path / "rules.yml"
    rules.write_text(blocks[1])
    for argv in (["check", "config", str(config)], ["check", "rules", str(rules)]):
        checked = subprocess.run(
            [promtool_program(), *argv], capture_output=True, text=True, timeout=60
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 8 rules found" in checked.stdout
