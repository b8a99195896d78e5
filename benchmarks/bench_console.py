"""Console pages in a real headless Chromium: the sites page with 50 resources and the jobs page
with 1,000 jobs, against the same data fetched straight from the REST API.

Starts `iri-gateway serve` on a fresh data folder with a generated profile of RESOURCES copies
of the shipped `local` resource (`site-01` ...), submits JOBS quick jobs (`/bin/true`, no
container) to `site-01`, then times in Chromium (Debian's chromium + chromium-driver, as the
console tests use) the time from the start of navigation to the page marking itself loaded
(`body[data-loaded]`, set once every row is drawn), ROUNDS times each. The baseline is what a
script would do instead: the same API requests the page makes, sent one after the other with
httpx (no drawing at all). The ratio says what the page itself costs.

    .venv/bin/python benchmarks/bench_console.py --resources 50 --jobs 1000

Target (issue #15): both pages under 300 ms on this machine.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from ruamel.yaml import YAML
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver

ROOT = Path(__file__).resolve().parent.parent
LOADED_AT = """
window.__loadedAt = null;
new MutationObserver((changes, observer) => {
  if (document.body && document.body.dataset.loaded === "true") {
    window.__loadedAt = performance.now();
    observer.disconnect();
  }
}).observe(document, {attributes: true, subtree: true, attributeFilter: ["data-loaded"]});
"""
"""Installed before any page script runs (CDP), so the mark is taken the moment it is set."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def write_profile(folder: Path, resources: int) -> Path:
    """The shipped local profile with its resource copied RESOURCES times."""
    shipped = YAML(typ="safe").load((ROOT / "facility_profiles" / "local.yaml").read_text())
    template = shipped["resources"][0]
    template["nodes"].pop("detect", None)  # 50 copies need not measure this machine 50 times
    shipped["facility"]["id"] = "bench"
    shipped["resources"] = []
    for index in range(1, resources + 1):
        resource = copy.deepcopy(template)
        resource["id"] = f"site-{index:02d}"
        resource["name"] = f"Site {index}"
        shipped["resources"].append(resource)
    path = folder / "bench.yaml"
    path.write_text(json.dumps(shipped, indent=1))  # JSON is YAML
    return path


def browser(profile_dir: Path) -> WebDriver:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        f"--user-data-dir={profile_dir}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": LOADED_AT})
    return driver


PHASES = """
const loaded = window.__loadedAt;
const nav = performance.getEntriesByType("navigation")[0];
const data = performance.getEntriesByType("resource")
  .filter((e) => e.name.includes("/api/v2/compute/"))[0];
const assets = performance.getEntriesByType("resource")
  .filter((e) => e.name.includes("/console/static/") && e.startTime < data.startTime);
return {loaded, document: nav.responseEnd,
        assets: Math.max(...assets.map((e) => e.responseEnd)), asked: data.startTime,
        api: data.responseEnd - data.startTime, after: loaded - data.responseEnd};
"""
"""Where a page's time goes, from Chromium's navigation and resource timing (ms): the HTML
received (`document`), the last asset it loads first received (`assets`: style sheet and
JavaScript modules), the page's data request sent (`asked`: the HTML parsed, the modules
fetched and started), that request's own time (`api`), and decoding plus drawing after it
(`after`)."""


def page_ms(driver: WebDriver, url: str, timeout: float = 60) -> dict[str, float]:
    """Milliseconds from navigation start to the page marking itself loaded (`loaded`), and
    the phases of PHASES."""
    driver.get(url)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if driver.execute_script("return window.__loadedAt") is not None:
            return {k: float(v) for k, v in driver.execute_script(PHASES).items()}
        time.sleep(0.01)
    raise SystemExit(f"{url} did not mark itself loaded within {timeout} s")


def api_ms(client: httpx.Client, requests: list[tuple[str, str]]) -> float:
    """Milliseconds for the same requests the page makes (method, path), one after the other."""
    started = time.perf_counter()
    for method, path in requests:
        body = {} if method == "POST" else None
        client.request(method, path, json=body).raise_for_status()
    return (time.perf_counter() - started) * 1000


def submit_jobs(client: httpx.Client, count: int, project: str) -> None:
    job = {"executable": "/bin/true", "name": "bench", "attributes": {"account": project}}

    def one(_: int) -> None:
        for _attempt in range(20):
            answer = client.post("/api/v2/compute/job/site-01", json=job)
            if answer.status_code < 500:
                answer.raise_for_status()
                return
            time.sleep(0.5)
        answer.raise_for_status()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(count)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resources", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-console-") as scratch:
        folder = Path(scratch)
        profile = write_profile(folder, args.resources)
        data = folder / "data"
        port = free_port()
        log = (folder / "serve.log").open("w")
        served = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "iri_gateway",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--data-dir",
                str(data),
                "--profiles",
                str(profile),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        driver = None
        try:
            for _ in range(300):
                try:
                    httpx.get(f"{url}/health", timeout=1)
                    break
                except httpx.TransportError:
                    time.sleep(0.1)
            made = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "iri_gateway",
                    "token",
                    "create",
                    "bench",
                    "--project",
                    "bench",
                    "--data-dir",
                    str(data),
                ],
                capture_output=True,
                text=True,
                check=True,
                timeout=60,
            )
            token = made.stdout.strip()
            client = httpx.Client(
                base_url=url, timeout=60, headers={"Authorization": f"Bearer {token}"}
            )
            started = time.perf_counter()
            submit_jobs(client, args.jobs, "bench")
            print(f"{args.jobs} jobs submitted in {time.perf_counter() - started:.1f} s")

            # The requests the pages make: one each (the sign-in check of the header,
            # /account/projects, runs beside them and is not counted).
            sites_paths = [("GET", "/api/v2/compute/capabilities")]
            jobs_paths = [
                ("GET", "/api/v2/compute/jobs?offset=0&limit=50&state=all&include_spec=true")
            ]

            driver = browser(folder / "chromium")
            driver.get(f"{url}/console/sign-in")
            driver.execute_script(
                "sessionStorage.setItem(arguments[0], arguments[1])", *_token_key(driver, token)
            )
            results: dict[str, tuple[list[dict[str, float]], list[float]]] = {}
            for name, path, paths in (
                ("sites", "/console/sites", sites_paths),
                ("jobs", "/console/jobs", jobs_paths),
            ):
                page_ms(driver, f"{url}{path}")  # warm: assets cached, server warmed
                api_ms(client, paths)
                pages = [page_ms(driver, f"{url}{path}") for _ in range(args.rounds)]
                apis = [api_ms(client, paths) for _ in range(args.rounds)]
                results[name] = (pages, apis)
            shown = driver.execute_script("return document.querySelectorAll('tbody tr').length")
            print(f"jobs page rows drawn: {shown}")
        finally:
            if driver is not None:
                driver.quit()
            served.terminate()
            served.wait(30)
            log.close()

    print(
        f"{'page':<6} {'requests':>8} {'page ms (median)':>17} {'API alone ms':>13} "
        f"{'ratio':>6}  target < 300 ms"
    )
    for name, (pages, apis) in results.items():
        page, api = statistics.median(p["loaded"] for p in pages), statistics.median(apis)
        count = len(sites_paths) if name == "sites" else len(jobs_paths)
        verdict = "met" if page < 300 else "MISSED"
        print(f"{name:<6} {count:>8} {page:>17.0f} {api:>13.0f} {page / api:>6.2f}  {verdict}")
    print(
        "where the page's time goes, medians in ms (Chromium's navigation and resource "
        "timing): HTML received; assets received; data request sent; its time; decode and draw "
        "after it"
    )
    for name, (pages, _) in results.items():
        middle = {
            k: statistics.median(p[k] for p in pages)
            for k in ("document", "assets", "asked", "api", "after")
        }
        print(f"{name:<6} " + "  ".join(f"{k} {v:.0f}" for k, v in middle.items()))


def _token_key(driver: WebDriver, token: str) -> tuple[str, str]:
    """The sessionStorage key the console keeps its token under (read from its module)."""
    source = (ROOT / "iri_gateway" / "console" / "static" / "api.js").read_text()
    found = re.search(r"""const KEY = ["']([^"']+)["']""", source)
    if found is None:
        raise SystemExit("cannot find the console's sessionStorage key in api.js")
    return found.group(1), token


if __name__ == "__main__":
    main()
