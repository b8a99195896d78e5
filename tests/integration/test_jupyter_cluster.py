"""JupyterLab in a job on the test Slurm, opened through the gateway in headless Chromium
(issue 29: "a site's interactive app").

The job is the `jupyterlab` template exactly as facility_profiles/example-cdi.yaml ships it
(read from that file; only where JupyterLab is installed differs: /opt/iri-jupyter, which
scripts/test-all installs), launched on `cluster-ssh` (as the mapped account `alice`, its
port reached through the SSH login node) with a port of its own. A link from openJobPort
opens the lab in Chromium; a notebook is made from the launcher, a cell is typed and run,
and its output comes back over the kernel's WebSocket, all through the proxy. Another
user gets no link, and no cookie on the proxy's origin holds the user's gateway token.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from tests.console.conftest import chromium, wait_for
from tests.integration.gateway_process import API, Gateway, serve
from tests.support.serve import free_port, issue_token

ROOT = Path(__file__).resolve().parent.parent.parent
SHIPPED = ROOT / "facility_profiles" / "example-cdi.yaml"
JUPYTER = Path("/opt/iri-jupyter/bin")
SITE_JUPYTER = "/opt/jupyter/bin"
"""Where the shipped template ASSUMES JupyterLab is; the test cluster has it at JUPYTER."""
RESOURCE = "cluster-ssh"


@pytest.fixture(scope="module")
def jupyter_profile(cluster_profile: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test cluster's profile with the shipped `jupyterlab` template added."""
    if not (JUPYTER / "jupyter-lab").exists():
        pytest.fail(f"{JUPYTER}/jupyter-lab is missing: scripts/test-all installs it")
    template = yaml.safe_load(SHIPPED.read_text())["templates"]["jupyterlab"]
    assert SITE_JUPYTER in template["bootstrap"], "the shipped template changed its path"
    template["bootstrap"] = template["bootstrap"].replace(SITE_JUPYTER, str(JUPYTER))
    profile = yaml.safe_load(cluster_profile.read_text())
    profile["templates"] = {"jupyterlab": template}
    path = tmp_path_factory.mktemp("jupyter-profile") / "cluster.yaml"
    path.write_text(yaml.safe_dump(profile))
    return path


@pytest.fixture(scope="module")
def gateway(jupyter_profile: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    port = free_port()
    env = {"IRI_GATEWAY_PROXY_URL": f"http://localhost:{port}", "IRI_GATEWAY_POLL_FAST": "0.5"}
    with serve(
        jupyter_profile, tmp_path_factory.mktemp("jupyter") / "data", env=env, port=port
    ) as g:
        yield g


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    driver = chromium(tmp_path_factory.mktemp("jupyter-chromium"))
    try:
        yield driver
    finally:
        driver.quit()


def status(gateway: Gateway, job_id: str) -> dict[str, Any]:
    answer = httpx.get(
        f"{gateway.url}{API}/compute/status/{RESOURCE}/{job_id}",
        headers=gateway.headers(),
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    document: dict[str, Any] = answer.json()["status"]
    return document


def lab_answers(gateway: Gateway, job_id: str, timeout: float = 180) -> None:
    """Wait until the lab answers through the proxy (`api/status`, with the user's token)."""
    proxy = gateway.url.replace("127.0.0.1", "localhost")
    url = f"{proxy}/{job_id}/main/lab/api/status"
    deadline = time.monotonic() + timeout
    while True:
        answer = httpx.get(url, headers={"Authorization": f"Bearer {gateway.token}"}, timeout=30)
        if answer.status_code == 200:
            return
        job = status(gateway, job_id)
        assert job["state"] not in ("completed", "failed", "canceled"), job
        assert time.monotonic() < deadline, f"{answer.status_code} {answer.text}\n{job}"
        time.sleep(1)


def test_a_notebook_runs_a_cell_through_the_gateway(
    gateway: Gateway, browser: WebDriver, tmp_path: Path
) -> None:
    spec = {
        "name": "my-notebook",
        "template": "jupyterlab",
        "ports": {"lab": free_port()},
        "resources": {"exclusive_node_use": False, "memory": 1024 * 1024 * 1024},
        "attributes": {"duration": 900},
    }
    launched = httpx.post(
        f"{gateway.url}{API}/compute/job/{RESOURCE}",
        json=spec,
        headers=gateway.headers(),
        timeout=60,
    )
    assert launched.status_code == 200, f"{launched.text}\n{gateway.tracebacks()}"
    job_id: str = launched.json()["id"]
    try:
        lab_answers(gateway, job_id)
        link_url = f"{gateway.url}{API}/compute/ports/{RESOURCE}/{job_id}/main/lab"
        bob = issue_token(gateway.log.parent, "bob", "proj1")
        theirs = httpx.post(link_url, headers={"Authorization": f"Bearer {bob}"}, timeout=30)
        assert theirs.status_code == 404, theirs.text
        link = httpx.post(link_url, headers=gateway.headers(), timeout=30)
        assert link.status_code == 201, link.text

        browser.get(link.json()["url"])
        wait_for(browser, "location.pathname.endsWith('/main/lab/lab')", 60)
        assert browser.current_url.startswith(gateway.url.replace("127.0.0.1", "localhost"))
        # The launcher's Python notebook; a cell typed and run; its output shown.
        card = wait_for(
            browser, "document.querySelector('.jp-LauncherCard[data-category=\"Notebook\"]')", 120
        )
        browser.execute_script("arguments[0].click()", card)
        editor = wait_for(
            browser, "document.querySelector('.jp-Notebook .jp-Cell .cm-content')", 60
        )
        # The kernel connected over its WebSocket (through the proxy) and idle.
        wait_for(browser, "document.body.innerText.includes('(ipykernel) | Idle')", 60)
        browser.execute_script("arguments[0].focus()", editor)
        editor.send_keys("print(6 * 7, 'from the job')")
        editor.send_keys(Keys.SHIFT, Keys.ENTER)
        output = wait_for(
            browser,
            "[...document.querySelectorAll('.jp-OutputArea-output')]"
            ".map(e => e.innerText).find(t => t.includes('from the job'))",
            120,
        )
        assert str(output).strip() == "42 from the job"

        cookies = browser.get_cookies()
        assert any(c["name"] == "iri-proxy-session" and c["httpOnly"] for c in cookies)
        assert not [c for c in cookies if gateway.token in str(c.get("value"))]
        assert gateway.token not in browser.page_source
    except Exception:
        browser.save_screenshot(str(tmp_path / "jupyter.png"))
        # What the page and the proxy saw, for the report.
        print("browser console:", *browser.get_log("browser")[-30:], sep="\n")
        lines = gateway.log.read_text().splitlines()
        print("proxy log:", *[line for line in lines if "port proxy" in line][-40:], sep="\n")
        raise
    finally:
        httpx.delete(
            f"{gateway.url}{API}/compute/cancel/{RESOURCE}/{job_id}",
            headers=gateway.headers(),
            timeout=60,
        )
    # Once the job has ended, the lab is closed (410), link and all.
    deadline = time.monotonic() + 60
    while status(gateway, job_id)["state"] not in ("completed", "failed", "canceled"):
        assert time.monotonic() < deadline
        time.sleep(1)
    gone = httpx.post(link_url, headers=gateway.headers(), timeout=30)
    assert gone.status_code == 410, gone.text
