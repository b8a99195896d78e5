"""The console signed in through a real OpenID provider (node-oidc-provider) by a real
headless Chromium (issue 31, part 1): the sign-in page offers the provider, its own login
page signs the user in, the console comes back signed in with an HttpOnly session (no
script sees it, no token in the page's storage), changes carry the CSRF token, and sign-out
ends the session at the gateway and at the provider."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from tests.console.conftest import chromium, wait_for
from tests.support.openid_provider import Provider, running_provider
from tests.support.serve import RunningServe, free_port, running_serve

AUDIENCE = "https://gateway.test/api"


@dataclass(frozen=True)
class Site:
    served: RunningServe
    provider: Provider

    @property
    def url(self) -> str:
        return self.served.url


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    folder = tmp_path_factory.mktemp("openid-console")
    with running_provider(
        folder / "provider", redirect_uri=f"{public}/console/sign-in/callback", audience=AUDIENCE
    ) as provider:
        settings = {
            "IRI_GATEWAY_AUTH": "jwt",
            "IRI_GATEWAY_JWKS_URL": provider.jwks_url,
            "IRI_GATEWAY_JWT_ISSUER": provider.issuer,
            "IRI_GATEWAY_JWT_AUDIENCE": AUDIENCE,
            "IRI_GATEWAY_JWT_EXACT_AUDIENCE": "true",
            "IRI_GATEWAY_JWT_WRITE_SCOPE": "iri.write",
            "IRI_GATEWAY_OPENID_ISSUER": provider.issuer,
            "IRI_GATEWAY_OPENID_CLIENT_ID": "iri-console",
            "IRI_GATEWAY_OPENID_CLIENT_SECRET": "console-secret",
            "IRI_GATEWAY_OPENID_SCOPES": "openid profile iri.write",
            "IRI_GATEWAY_OPENID_RESOURCE": AUDIENCE,
            "IRI_GATEWAY_PUBLIC_URL": public,
        }
        with running_serve(folder / "data", port=port, extra_env=settings) as served:
            yield Site(served, provider)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    driver = chromium(tmp_path / "chromium-profile")
    try:
        yield driver
    finally:
        driver.quit()


def sign_in_at_the_provider(driver: WebDriver, site: Site, user: str) -> None:
    """From the sign-in page, through the provider's own login page, as a person would."""
    wait_for(driver, "!document.getElementById('openid').hidden")
    assert site.provider.issuer in driver.find_element("id", "openid-provider").text
    driver.find_element("id", "openid-sign-in").click()
    wait_for(driver, "document.querySelector('input[name=login]')")
    assert driver.current_url.startswith(site.provider.issuer)
    driver.find_element("name", "login").send_keys(user)
    driver.find_element("name", "password").send_keys("any password")
    driver.find_element("css selector", "button[type=submit]").click()


def test_a_user_signs_in_at_the_provider_works_and_signs_out(
    site: Site, browser: WebDriver
) -> None:
    browser.get(f"{site.url}/console/jobs")
    wait_for(browser, "location.pathname === '/console/sign-in'")
    sign_in_at_the_provider(browser, site, "alice")
    wait_for(browser, f"location.href === {site.url + '/console/jobs'!r}")
    wait_for(browser, "document.getElementById('who').textContent.includes('alice')")
    assert "projects: demo" in browser.find_element("id", "who").text
    cookies = browser.execute_script("return document.cookie")
    assert "iri-csrf=" in cookies and "iri-session" not in cookies  # HttpOnly: unseen
    assert browser.execute_script("return sessionStorage.length") == 0  # no token kept

    made = browser.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        const api = [...document.scripts].map((s) => s.src).find((s) => s.includes('/static/'))
          .replace(/[^/]+$/, 'api.js');
        import(api).then((m) => m.call('/compute/job/local', { method: 'POST',
          body: { executable: '/bin/sleep', arguments: ['60'], attributes: { account: 'demo' } },
        })).then((job) => done(job.id), (error) => done(`failed: ${error.message}`));
        """
    )
    assert isinstance(made, str) and not made.startswith("failed"), made
    wait_for(browser, f"document.body.textContent.includes({made!r})", timeout=30)

    kept = {c["name"]: c["value"] for c in browser.get_cookies()}  # WebDriver sees HttpOnly
    stolen = {"iri-session": kept["iri-session"]}
    with httpx.Client(base_url=site.url, cookies=stolen) as thief:
        assert thief.get("/api/v2/account/me").json()["user"] == "alice"

    browser.find_element("id", "sign-out").click()
    wait_for(browser, "document.querySelector('button[name=logout]')")  # the provider asks
    browser.find_element("css selector", "button[name=logout]").click()
    wait_for(browser, "location.pathname === '/console/sign-in'", timeout=30)
    assert "signed-out" in browser.current_url
    assert not browser.find_element("id", "signed-out").get_attribute("hidden")
    session = browser.execute_script("return fetch('/console/session').then((r) => r.json())")
    assert session["signed_in"] is False
    with httpx.Client(base_url=site.url, cookies=stolen) as thief:  # ended on the gateway
        refused = thief.get("/api/v2/account/me")
        assert refused.status_code == 401 and "session has ended" in refused.json()["detail"]


def test_a_refused_sign_in_comes_back_with_the_reason(site: Site, browser: WebDriver) -> None:
    browser.get(f"{site.url}/console/sign-in/callback?error=access_denied&error_description=no")
    wait_for(browser, "!document.getElementById('sign-in-failed').hidden")
    shown = browser.find_element("id", "sign-in-failed").text
    assert shown == (
        "Sign-in at the identity provider failed: the identity provider did not sign you in "
        "(access_denied: no)"
    )
