"""A real `iri-gateway serve` and a real headless Chromium (Debian's `chromium` and
`chromium-driver`, installed by scripts/test-all), one of each per test module.

The server loads the shipped profiles and tests/console/hostile.yaml (strings that are
markup). Chromium runs with the flags that keep it from reaching out to the internet, and
records its network requests so a test can check that none leaves 127.0.0.1.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from tests.support.serve import RunningServe, clean_env, running_serve

ROOT = Path(__file__).parent.parent.parent
SCREENSHOTS = ROOT / "docs" / "console"
HOSTILE_PROFILE = Path(__file__).parent / "hostile.yaml"
WIDTHS = {"laptop": (1280, 900), "phone": (390, 844)}


@dataclass(frozen=True)
class Console:
    """The running server, its first-start token (user admin) and a second user's token."""

    served: RunningServe
    admin: str
    bob: str
    data: Path

    def token(self, user: str, project: str) -> str:
        """A new bearer token of `user` granting `project` (`iri-gateway token create`)."""
        return token_of(self.data, user, project)

    @property
    def url(self) -> str:
        return self.served.url

    def capabilities(self) -> list[dict[str, object]]:
        """What the API says of every resource (the console must show the same)."""
        auth = {"Authorization": f"Bearer {self.admin}"}
        ids = [r["id"] for r in httpx.get(f"{self.url}/api/v2/status/resources").json()]
        return [
            httpx.get(f"{self.url}/api/v2/compute/capabilities/{rid}", headers=auth).json()
            for rid in ids
        ]


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    data = tmp_path_factory.mktemp("console") / "data"
    args = ("--profiles", str(ROOT / "facility_profiles"), "--profiles", str(HOSTILE_PROFILE))
    with running_serve(data, args=args) as served:
        printed = re.search(r"\(shown once\):\n\s+(\S+)", served.output())
        assert printed is not None, served.output()
        yield Console(served, printed.group(1), token_of(data, "bob", "bobs"), data)


def token_of(data: Path, user: str, project: str, *options: str) -> str:
    """A token of `user` for `project` from `iri-gateway token create` (with `options`)."""
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "iri_gateway",
            "token",
            "create",
            user,
            "--project",
            project,
            "--data-dir",
            str(data),
            *options,
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=True,
        timeout=60,
    )
    return made.stdout.strip()


def chromium(profile: Path) -> WebDriver:
    """Debian's headless Chromium at laptop size, kept off the internet, its user data in
    `profile`, recording its network requests and console messages; the caller quits it."""
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
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(30)
    return driver


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def page(browser: WebDriver, console: Console) -> Iterator[WebDriver]:
    """The module's browser, signed out and at laptop width, with its logs emptied."""
    browser.get(f"{console.url}/console/sign-in")
    browser.execute_script("sessionStorage.clear()")
    set_width(browser, "laptop")
    browser.get_log("performance")
    browser.get_log("browser")
    yield browser


def set_width(driver: WebDriver, name: str) -> None:
    """The page's viewport at a named width (CSS pixels), as a phone or a laptop shows it."""
    width, height = WIDTHS[name]
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
    )


def screenshots(driver: WebDriver, name: str) -> list[Path]:
    """NAME-1280.png (the laptop's window, the page's start as a person first sees it) and
    NAME-390.png (the whole page: a phone shows the rest by scrolling, and a window-sized
    picture would show only the header and the first filters) of the page as it is now:
    into docs/console/ with IRI_UPDATE_SCREENSHOTS=1 (as IRI_UPDATE_GOLDEN does for
    goldens), else into a scratch folder, so an ordinary test run leaves the committed
    pictures alone."""
    folder = (
        SCREENSHOTS
        if os.environ.get("IRI_UPDATE_SCREENSHOTS") == "1"
        else Path(tempfile.gettempdir()) / "iri-console-screenshots"
    )
    folder.mkdir(parents=True, exist_ok=True)
    taken = []
    for width_name, (width, _) in WIDTHS.items():
        set_width(driver, width_name)
        driver.execute_script("window.scrollTo(0, 0)")
        path = folder / f"{name}-{width}.png"
        if width_name == "phone":
            path.write_bytes(whole_page_png(driver))
        else:
            assert driver.save_screenshot(str(path)), path
        taken.append(path)
    set_width(driver, "laptop")
    return taken


def whole_page_png(driver: WebDriver) -> bytes:
    """The page from its top to the end of its content as a PNG, at the viewport's width.

    Chromium's DevTools capture beyond the viewport lays the page out as it is at the
    current width; the height is the document's, measured after the width was set."""
    width, height = driver.execute_script(
        "return [window.innerWidth, Math.ceil(document.documentElement.scrollHeight)]"
    )
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "fromSurface": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
        },
    )
    return base64.b64decode(shot["data"])


def wait_for(driver: WebDriver, script: str, timeout: float = 20) -> object:
    """The first truthy value of the JavaScript expression `script`."""
    return WebDriverWait(driver, timeout).until(lambda d: d.execute_script(f"return {script}"))


def sign_in(driver: WebDriver, console: Console, token: str) -> None:
    """Sign in through the page, as a person would, and wait for the sites page."""
    driver.get(f"{console.url}/console/sign-in")
    field = driver.find_element("id", "token")
    field.clear()
    field.send_keys(token)
    driver.find_element("css selector", "#sign-in button[type=submit]").click()
    wait_for(driver, "location.pathname === '/console/sites'")


def requested_urls(driver: WebDriver) -> list[str]:
    """Every URL the browser asked for since the log was last read."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls
