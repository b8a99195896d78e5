"""JupyterLab in a job on the test Slurm, opened through the gateway in headless Chromium
(issue 29: "a site's interactive app").

The job is the `jupyterlab` template exactly as facility_profiles/example-cdi.yaml ships it
(read from that file; only where JupyterLab is installed differs: /opt/iri-jupyter, which
scripts/test-all installs), launched with a port of its own on `cluster` (the gateway's own
account, root here, so the job adds a Jupyter config allowing root; the gateway reaches the
node directly) and on `cluster-ssh` (the mapped account `alice`, the template as shipped,
its port reached through the SSH login node). A link from openJobPort opens the lab in
Chromium; a notebook is made from the launcher, a cell is typed and run with Shift+Enter,
and its output comes back over the kernel's WebSocket, all through the proxy.

The proxy's origin is `http://lab.localhost:PORT`: Chromium resolves every `*.localhost` name
to this machine without DNS, and to Jupyter it is a name that is not local, like a site's
proxy host name (`localhost` itself would pass Jupyter's Host check whatever the template
said).

Also checked: the lab refuses a request straight to its port without the job's token (it
listens on every address of the node), the user's gateway token opens nothing there and is
in no cookie or page of the lab's origin, and another user gets 404 for the link.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import yaml
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement

from tests.console.conftest import chromium, wait_for
from tests.integration.gateway_process import API, Gateway, launch, serve_with_proxy, status
from tests.support.serve import free_port, issue_token

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent.parent
SHIPPED = ROOT / "facility_profiles" / "example-cdi.yaml"
JUPYTER = Path("/opt/iri-jupyter/bin")
JUPYTER_VERSION = "4.6.6"
"""The version scripts/test-all installs."""
SITE_JUPYTER = "/opt/jupyter/bin"
"""Where the shipped template ASSUMES JupyterLab is; the test cluster has it at JUPYTER."""
PROXY_HOST = "lab.localhost"
FINAL = ("completed", "failed", "canceled")


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
    data = tmp_path_factory.mktemp("jupyter") / "data"
    with serve_with_proxy(jupyter_profile, data, host=PROXY_HOST) as g:
        yield g


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    driver = chromium(tmp_path_factory.mktemp("jupyter-chromium"))
    try:
        yield driver
    finally:
        driver.quit()


def proxy_origin(gateway: Gateway) -> str:
    """The proxy's origin, as the browser reaches it."""
    return gateway.url.replace("127.0.0.1", PROXY_HOST)


def through_proxy(gateway: Gateway, path: str, **headers: str) -> httpx.Response:
    """GET `path` on the proxy's origin from this process (which, unlike Chromium, does not
    resolve `*.localhost`: the request goes to 127.0.0.1 with the proxy's `Host`)."""
    host = proxy_origin(gateway).removeprefix("http://")
    return httpx.get(f"{gateway.url}{path}", headers={"Host": host, **headers}, timeout=30)


def lab_answers(gateway: Gateway, resource: str, job_id: str, timeout: float = 180) -> None:
    """Wait until the lab answers through the proxy (`api/status`, with the user's token)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = through_proxy(
            gateway, f"/{job_id}/main/lab/api/status", Authorization=f"Bearer {gateway.token}"
        )
        if answer.status_code == 200:
            return
        job = status(gateway, resource, job_id)
        assert job["state"] not in FINAL, job
        assert time.monotonic() < deadline, f"{answer.status_code} {answer.text}\n{job}"
        time.sleep(1)


def test_the_installed_jupyterlab_is_the_pinned_one() -> None:
    """scripts/test-all's JupyterLab, readable and runnable by every user (alice's jobs)."""
    lab = JUPYTER / "jupyter-lab"
    assert lab.exists(), f"{lab} is missing: scripts/test-all installs it"
    assert lab.stat().st_mode & 0o005 == 0o005, oct(lab.stat().st_mode)
    version = (JUPYTER.parent / "lib").glob(f"python3*/site-packages/jupyterlab-{JUPYTER_VERSION}*")
    assert list(version), f"JupyterLab {JUPYTER_VERSION} is not the one in {JUPYTER.parent}"


@pytest.mark.parametrize("resource", ["cluster", "cluster-ssh"])
def test_a_notebook_runs_a_cell_through_the_gateway(
    gateway: Gateway, browser: WebDriver, tmp_path: Path, resource: str
) -> None:
    lab_port = free_port()
    spec: dict[str, Any] = {
        "name": "my-notebook",
        "template": "jupyterlab",
        "ports": {"lab": lab_port},
        "resources": {"exclusive_node_use": False, "memory": 1024 * 1024 * 1024},
        "attributes": {"duration": 900},
    }
    if resource == "cluster":
        # This resource's jobs run as the gateway's own account, root on the test machine,
        # and Jupyter refuses root unless told: the job (not the template) adds a config
        # folder saying so. No site runs its users' jobs as root.
        config = tmp_path / "jupyter-config"
        config.mkdir()
        (config / "jupyter_server_config.json").write_text('{"ServerApp": {"allow_root": true}}')
        spec["environment"] = {"JUPYTER_CONFIG_PATH": str(config)}
    job_id = launch(gateway, resource, spec)
    link_url = f"{gateway.url}{API}/compute/ports/{resource}/{job_id}/main/lab"
    try:
        lab_answers(gateway, resource, job_id)
        # Straight to the lab's port (it listens on every address of the node, this machine
        # here): without the job's token, or with the user's gateway token, nothing opens.
        direct = f"http://127.0.0.1:{lab_port}/{job_id}/main/lab/api/status"
        assert httpx.get(direct, timeout=30).status_code == 403
        as_user = {"Authorization": f"token {gateway.token}"}
        assert httpx.get(direct, headers=as_user, timeout=30).status_code == 403

        bob = issue_token(gateway.log.parent, "bob", "proj1")
        theirs = httpx.post(link_url, headers={"Authorization": f"Bearer {bob}"}, timeout=30)
        assert theirs.status_code == 404, theirs.text
        link = httpx.post(link_url, headers=gateway.headers(), timeout=30)
        assert link.status_code == 201, link.text

        browser.get(link.json()["url"])
        wait_for(browser, "location.pathname.endsWith('/main/lab/lab')", 60)
        assert browser.current_url.startswith(proxy_origin(gateway) + "/"), browser.current_url
        # The launcher's Python notebook; a cell typed and run; its output shown.
        card = wait_for(
            browser, "document.querySelector('.jp-LauncherCard[data-category=\"Notebook\"]')", 120
        )
        browser.execute_script("arguments[0].click()", card)
        editor = cast(
            WebElement,
            wait_for(browser, "document.querySelector('.jp-Notebook .jp-Cell .cm-content')", 60),
        )
        # The kernel connected over its WebSocket (through the proxy) and idle.
        wait_for(browser, "document.body.innerText.includes('(ipykernel) | Idle')", 60)
        browser.execute_script("arguments[0].focus()", editor)
        editor.send_keys("import os; print(6 * 7, 'from', os.getcwd())")
        editor.send_keys(Keys.SHIFT, Keys.ENTER)
        output = wait_for(
            browser,
            "[...document.querySelectorAll('.jp-OutputArea-output')]"
            ".map(e => e.innerText).find(t => t.startsWith('42 from'))",
            120,
        )
        # The kernel runs in the job's directory (the lab's root_dir): the job's own folder.
        assert str(output).strip().startswith("42 from /"), output
        assert job_id in str(output), output

        cookies = browser.get_cookies()
        assert any(c["name"] == "iri-proxy-session" and c["httpOnly"] for c in cookies)
        assert not [c for c in cookies if gateway.token in str(c.get("value"))]
        assert gateway.token not in browser.page_source
    except Exception:
        browser.save_screenshot(str(tmp_path / "jupyter.png"))
        # What the page and the proxy saw, for the report.
        print("browser console:", *cast(Any, browser).get_log("browser")[-30:], sep="\n")
        lines = gateway.log.read_text().splitlines()
        print("proxy log:", *[line for line in lines if "port proxy" in line][-40:], sep="\n")
        raise
    finally:
        httpx.delete(
            f"{gateway.url}{API}/compute/cancel/{resource}/{job_id}",
            headers=gateway.headers(),
            timeout=60,
        )
    # Once the job has ended, the lab is closed (410), link and all.
    deadline = time.monotonic() + 60
    while status(gateway, resource, job_id)["state"] not in FINAL:
        assert time.monotonic() < deadline
        time.sleep(1)
    gone = httpx.post(link_url, headers=gateway.headers(), timeout=30)
    assert gone.status_code == 410, gone.text


def test_a_lab_whose_port_is_taken_fails_its_job(gateway: Gateway) -> None:
    """The template's `port_retries=0`: Jupyter does not move to another port (where the
    proxy would never look, leaving a running job whose lab answers 502), the job fails."""
    with socket.create_server(("0.0.0.0", 0)) as taken:
        spec = {
            "name": "my-notebook",
            "template": "jupyterlab",
            "ports": {"lab": taken.getsockname()[1]},
            "resources": {"exclusive_node_use": False, "memory": 1024 * 1024 * 1024},
            "attributes": {"duration": 900},
        }
        launched = httpx.post(
            f"{gateway.url}{API}/compute/job/cluster-ssh",
            json=spec,
            headers=gateway.headers(),
            timeout=60,
        )
        assert launched.status_code == 200, launched.text
        job_id: str = launched.json()["id"]
        try:
            deadline = time.monotonic() + 120
            while (job := status(gateway, "cluster-ssh", job_id))["state"] not in FINAL:
                assert time.monotonic() < deadline, job
                time.sleep(1)
            assert job["state"] == "failed", job
        finally:
            httpx.delete(
                f"{gateway.url}{API}/compute/cancel/cluster-ssh/{job_id}",
                headers=gateway.headers(),
                timeout=60,
            )
