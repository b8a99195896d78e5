"""The port proxy end to end on the `local` resource: a real serve whose proxy has an origin
of its own (`http://localhost:PORT` while the API is used as `http://127.0.0.1:PORT`), and a
real job listening on its declared port.

What is held here: only the owner reaches a port (another user gets the same 404 as for no
job); a port opens when its job runs (409 before) and closes when it ends (410, and an open
WebSocket is cut); a link's ticket becomes an HttpOnly, SameSite cookie for that port's
path only; the proxy's origin serves nothing of the API or the console; the user's gateway
token and the proxy's session never reach the service, which sees the job's own token
instead. (The same on the test Slurm, directly and through the SSH login node:
tests/integration/test_port_proxy_cluster.py.)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import UNHURRIED, token_works
from tests.support.port_proxy import ProxyGateway as Gateway
from tests.support.port_proxy import auth, proxy_gateway
from tests.support.serve import free_port, issue_token, running_serve
from tests.support.websocket_client import WebSocketClosed, WebSocketRefused, WebSocketSession

SERVICE = Path(__file__).parent.parent / "support" / "service_echo.py"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with proxy_gateway(tmp_path_factory.mktemp("proxy-gateway")) as served:
        yield served


def launch(gateway: Gateway, spec: dict[str, Any], token: str | None = None) -> str:
    answer = httpx.post(
        f"{gateway.api}/api/v2/compute/job/local",
        json=spec,
        headers=auth(token or gateway.alice),
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    job_id: str = answer.json()["id"]
    return job_id


def job(gateway: Gateway, job_id: str) -> dict[str, Any]:
    answer = httpx.get(
        f"{gateway.api}/api/v2/compute/status/local/{job_id}",
        headers=auth(gateway.alice),
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    document: dict[str, Any] = answer.json()
    return document


def wait_state(gateway: Gateway, job_id: str, states: set[str], timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state: str = job(gateway, job_id)["status"]["state"]
        if state in states:
            return state
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not reach {states} in {timeout} s")


def link(
    gateway: Gateway, job_id: str, port: str, token: str, member: str = "main"
) -> httpx.Response:
    return httpx.post(
        f"{gateway.api}/api/v2/compute/ports/local/{job_id}/{member}/{port}",
        headers=auth(token),
        timeout=10,
    )


def cancel(gateway: Gateway, job_id: str) -> None:
    httpx.delete(f"{gateway.api}/api/v2/compute/cancel/local/{job_id}", headers=auth(gateway.alice))


def sleeper(seconds: int, ports: dict[str, int]) -> dict[str, Any]:
    return {"executable": "sleep", "arguments": [str(seconds)], "ports": ports}


def test_a_job_lists_its_ports_with_their_proxy_addresses(gateway: Gateway) -> None:
    job_id = launch(gateway, sleeper(30, {"http": 18080, "ws": 18081}))
    try:
        ports = job(gateway, job_id)["status"]["meta_data"]["ports"]
        assert ports == [
            {
                "member": "main",
                "name": "http",
                "port": 18080,
                "url": f"{gateway.proxy}/{job_id}/main/http/",
            },
            {
                "member": "main",
                "name": "ws",
                "port": 18081,
                "url": f"{gateway.proxy}/{job_id}/main/ws/",
            },
        ]
        listed = httpx.get(
            f"{gateway.api}/api/v2/compute/ports/local/{job_id}", headers=auth(gateway.alice)
        )
        assert listed.status_code == 200
        assert [entry["url"] for entry in listed.json()] == [p["url"] for p in ports]
    finally:
        httpx.delete(
            f"{gateway.api}/api/v2/compute/cancel/local/{job_id}", headers=auth(gateway.alice)
        )


def test_another_user_gets_the_answer_of_no_job(gateway: Gateway) -> None:
    job_id = launch(gateway, sleeper(30, {"http": 18082}))
    try:
        wait_state(gateway, job_id, {"active"})
        theirs = link(gateway, job_id, "http", gateway.bob)
        nothing = link(gateway, "00000000-0000-4000-8000-000000000000", "http", gateway.bob)
        assert theirs.status_code == nothing.status_code == 404
        undeclared = link(gateway, job_id, "other", gateway.alice)
        assert undeclared.status_code == 404
        assert link(gateway, job_id, "http", gateway.alice, member="worker1").status_code == 404
        listed = httpx.get(
            f"{gateway.api}/api/v2/compute/ports/local/{job_id}", headers=auth(gateway.bob)
        )
        assert listed.status_code == 404
    finally:
        httpx.delete(
            f"{gateway.api}/api/v2/compute/cancel/local/{job_id}", headers=auth(gateway.alice)
        )


def test_a_port_opens_when_its_job_runs_and_is_gone_when_it_ends(gateway: Gateway) -> None:
    # Held in the local scheduler's queue first: a job waiting on its `pre_launch` is
    # active already (its script runs), so the queue is shown by a job in `new`, which the
    # store holds before the scheduler has it: a job refused by its scheduler stays there.
    job_id = launch(gateway, sleeper(3, {"http": 18083}))
    wait_state(gateway, job_id, {"active"})
    made = link(gateway, job_id, "http", gateway.alice)
    assert made.status_code == 201, made.text
    assert made.json()["url"].startswith(f"{gateway.proxy}/_iri/open?ticket=")
    assert made.json()["expires_at"] > time.time() + 30
    wait_state(gateway, job_id, {"completed"})
    gone = link(gateway, job_id, "http", gateway.alice)
    assert gone.status_code == 410, gone.text
    assert "ended" in gone.json()["detail"]


def test_the_proxy_origin_serves_no_api_and_no_console(gateway: Gateway) -> None:
    """The proxy's origin answers its own refusals, never the API's or the console's pages
    (a service's scripts there must not reach a signed-in console's answers)."""
    for path in ("/", "/api/v2/facility", "/console/", "/api/v2/compute/status/local"):
        answer = httpx.get(f"{gateway.proxy}{path}", headers=auth(gateway.alice), timeout=10)
        assert answer.status_code == 404, (path, answer.text)
        assert answer.headers["content-type"] == "application/problem+json"
        assert "/<job>/<member>/<port>/" in answer.json()["detail"]


def test_the_console_origin_never_serves_a_job_port(gateway: Gateway) -> None:
    """A port is served on the proxy's origin only: on the API's (the console's) the same
    path is nothing, so a service's page never runs where the console keeps its token."""
    job_id = launch(gateway, sleeper(30, {"http": 18087}))
    try:
        wait_state(gateway, job_id, {"active"})
        on_console = httpx.get(
            f"{gateway.api}/{job_id}/main/http/", headers=auth(gateway.alice), timeout=10
        )
        assert on_console.status_code == 404
        assert "iri-proxy" not in on_console.headers.get("set-cookie", "")
        opened = httpx.get(
            f"{gateway.api}/_iri/open?ticket=x.y", headers=auth(gateway.alice), timeout=10
        )
        assert opened.status_code == 404
    finally:
        cancel(gateway, job_id)


def test_a_proxied_request_needs_a_session_or_a_token(gateway: Gateway) -> None:
    job_id = launch(gateway, sleeper(30, {"http": 18084}))
    try:
        wait_state(gateway, job_id, {"active"})
        answer = httpx.get(f"{gateway.proxy}/{job_id}/main/http/", timeout=10)
        assert answer.status_code == 401
        assert "Open link" in answer.json()["detail"]
        forged = httpx.get(
            f"{gateway.proxy}/{job_id}/main/http/",
            headers={"Cookie": "iri-proxy-session=abc.def"},
            timeout=10,
        )
        assert forged.status_code == 401
        bad = httpx.get(f"{gateway.proxy}/_iri/open?ticket=abc.def", timeout=10)
        assert bad.status_code == 401
    finally:
        httpx.delete(
            f"{gateway.api}/api/v2/compute/cancel/local/{job_id}", headers=auth(gateway.alice)
        )


def test_a_ticket_becomes_a_cookie_for_its_port_only(gateway: Gateway) -> None:
    job_id = launch(gateway, sleeper(30, {"http": 18085}))
    try:
        wait_state(gateway, job_id, {"active"})
        made = link(gateway, job_id, "http", gateway.alice)
        assert made.status_code == 201, made.text
        opened = httpx.get(made.json()["url"], timeout=10, follow_redirects=False)
        assert opened.status_code == 303
        assert opened.headers["location"] == f"/{job_id}/main/http/"
        cookie = opened.headers["set-cookie"]
        assert cookie.startswith("iri-proxy-session=")
        attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")[1:]}
        assert {"httponly", "samesite", "path", "max-age"} <= attributes
        assert f"Path=/{job_id}/main/http/" in cookie
        assert "SameSite=Lax" in cookie
        assert "Secure" not in cookie  # the proxy's origin is http here
        assert opened.headers["cache-control"] == "no-store"
        assert opened.headers["referrer-policy"] == "no-referrer"
        again = httpx.get(made.json()["url"], timeout=10, follow_redirects=False)
        assert again.status_code == 401, "a link opens once"
        assert "opened already" in again.json()["detail"]
        assert "set-cookie" not in again.headers
    finally:
        httpx.delete(
            f"{gateway.api}/api/v2/compute/cancel/local/{job_id}", headers=auth(gateway.alice)
        )


def test_without_a_proxy_origin_links_are_refused_with_the_setting_named(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    alice = issue_token(data_dir, "alice", "proj1")
    with running_serve(data_dir, extra_env=UNHURRIED, ready=token_works(alice)) as served:
        answer = httpx.post(
            f"{served.url}/api/v2/compute/job/local",
            json=sleeper(30, {"http": 18086}),
            headers=auth(alice),
            timeout=30,
        )
        job_id = answer.json()["id"]
        document = httpx.get(
            f"{served.url}/api/v2/compute/status/local/{job_id}", headers=auth(alice)
        ).json()
        assert document["status"]["meta_data"]["ports"] == [
            {"member": "main", "name": "http", "port": 18086}
        ]
        refused = httpx.post(
            f"{served.url}/api/v2/compute/ports/local/{job_id}/main/http", headers=auth(alice)
        )
        assert refused.status_code == 501
        assert "proxy_url" in refused.json()["detail"]
        httpx.delete(f"{served.url}/api/v2/compute/cancel/local/{job_id}", headers=auth(alice))


# ---- through the proxy, to a real service ---------------------------------------------------


def echo(seconds: int, port: int) -> dict[str, Any]:
    """A job serving tests/support/service_echo.py on its port `http` for `seconds`."""
    command = (
        f'timeout {seconds} {sys.executable} {SERVICE} --port "$IRI_PORT_HTTP" '
        '--prefix "$IRI_PROXY_PATH_HTTP"'
    )
    return {"executable": "/bin/bash", "arguments": ["-c", command], "ports": {"http": port}}


def serving(gateway: Gateway, job_id: str, timeout: float = 30) -> None:
    """Wait until the job's service answers through the proxy."""
    deadline = time.monotonic() + timeout
    url = f"{gateway.proxy}/{job_id}/main/http/ping"
    while True:
        answer = httpx.get(url, headers=auth(gateway.alice), timeout=10)
        if answer.status_code == 200:
            return
        assert time.monotonic() < deadline, answer.text
        time.sleep(0.2)


def test_a_token_that_may_only_read_reaches_no_service(gateway: Gateway) -> None:
    """A service may do anything (a notebook runs code): reaching one is a change, refused
    to a read-only token through the proxy and for a link, while it still reads the job."""
    job_id = launch(gateway, echo(60, free_port()))
    try:
        serving(gateway, job_id)
        proxied = httpx.get(
            f"{gateway.proxy}/{job_id}/main/http/ping", headers=auth(gateway.alice_reads)
        )
        assert proxied.status_code == 403, proxied.text
        assert "may only read" in proxied.json()["detail"]
        refused = link(gateway, job_id, "http", gateway.alice_reads)
        assert refused.status_code == 403 and "may only read" in refused.json()["detail"]
        seen = httpx.get(
            f"{gateway.api}/api/v2/compute/status/local/{job_id}",
            headers=auth(gateway.alice_reads),
        )
        assert seen.status_code == 200 and seen.json()["status"]["state"] == "active"
    finally:
        cancel(gateway, job_id)


def test_the_service_sees_the_jobs_token_never_the_users(gateway: Gateway) -> None:
    job_id = launch(gateway, echo(60, free_port()))
    try:
        serving(gateway, job_id)
        made = link(gateway, job_id, "http", gateway.alice).json()["url"]
        with httpx.Client(timeout=10) as browser:
            page = browser.get(made, follow_redirects=True)
            assert page.status_code == 200, page.text
            seen = page.json()
            # The cookie jar sent the session; the service never sees it, nor a token.
            assert browser.cookies.get("iri-proxy-session") is not None
            headers = {name.lower(): value for name, value in seen["headers"].items()}
            assert "iri-proxy-session" not in headers.get("cookie", "")
            assert headers["authorization"].startswith("token ")
            with_token = browser.get(
                f"{gateway.proxy}/{job_id}/main/http/x",
                headers={**auth(gateway.alice), "Cookie": "theirs=kept"},
            ).json()
        headers = {name.lower(): value for name, value in with_token["headers"].items()}
        assert gateway.alice not in str(with_token)
        assert headers["cookie"] == "theirs=kept"  # the service's own cookies stay
        assert headers["x-forwarded-prefix"] == f"/{job_id}/main/http"
        assert headers["x-forwarded-host"] == gateway.proxy.removeprefix("http://")
        assert headers["host"] == gateway.proxy.removeprefix("http://")
        assert headers["authorization"] == seen["headers"].get(
            "Authorization", seen["headers"].get("authorization")
        )
    finally:
        cancel(gateway, job_id)


def test_the_gateways_own_cookies_neither_reach_a_service_nor_come_from_one(
    gateway: Gateway,
) -> None:
    """A browser sends a host's cookies to every port of it: a proxy on another port of the
    console's host gets the console's session cookie too, and must not pass it on; nor may a
    service set the proxy's or the console's cookies (a session of its choosing)."""
    job_id = launch(gateway, echo(60, free_port()))
    try:
        serving(gateway, job_id)
        sent = (
            "theirs=kept; iri-session=console.secret; iri-csrf=c; __Host-iri-session=s; "
            "iri-sign-in=b; iri-proxy-session=p"
        )
        answer = httpx.get(
            f"{gateway.proxy}/{job_id}/main/http/cookies",
            headers={**auth(gateway.alice), "Cookie": sent},
            timeout=10,
        )
        assert answer.status_code == 200, answer.text
        headers = {name.lower(): value for name, value in answer.json()["headers"].items()}
        assert headers["cookie"] == "theirs=kept"
        assert answer.headers.get_list("set-cookie") == ["theirs=1; Path=/"]
    finally:
        cancel(gateway, job_id)


def test_a_websocket_is_echoed_and_cut_when_the_job_ends(gateway: Gateway) -> None:
    job_id = launch(gateway, echo(8, free_port()))
    try:
        serving(gateway, job_id)
        url = f"{gateway.proxy}/{job_id}/main/http/ws".replace("http://", "ws://")
        with WebSocketSession(url, headers=auth(gateway.alice)) as session:
            session.send("hello")
            assert session.receive() == "hello"
            session.send(b"\x00\xff")
            assert session.receive() == b"\x00\xff"
            wait_state(gateway, job_id, {"completed", "failed"}, timeout=30)
            with pytest.raises(WebSocketClosed):
                for _ in range(20):  # the service may have closed first: either ends it
                    session.receive()
    finally:
        cancel(gateway, job_id)


def test_a_services_first_message_sent_with_its_handshake_is_not_lost(gateway: Gateway) -> None:
    """A service may send a message in the same write as its `101` (a Jupyter kernel's
    channel does): the proxy passes it on first, not dropped with the handshake's read."""
    job_id = launch(gateway, echo(60, free_port()))
    try:
        serving(gateway, job_id)
        url = f"{gateway.proxy}/{job_id}/main/http/ws-greet".replace("http://", "ws://")
        with WebSocketSession(url, headers=auth(gateway.alice)) as session:
            assert session.receive() == "hello"
            assert session.receive() == b"\x00"
            session.send(b"\x01\x02")
            assert session.receive() == b"\x01\x02"
    finally:
        cancel(gateway, job_id)


def test_a_page_of_another_origin_may_not_post_or_open_websockets(gateway: Gateway) -> None:
    """The service trusts the job's token the proxy adds, so the proxy refuses what a page
    of another origin sends with the user's session: a POST or a WebSocket (403); reads, the
    proxy's own origin and scripts without `Origin` pass."""
    job_id = launch(gateway, echo(60, free_port()))
    try:
        serving(gateway, job_id)
        url = f"{gateway.proxy}/{job_id}/main/http/x"
        evil = {**auth(gateway.alice), "Origin": "http://evil.localhost:1"}
        assert httpx.post(url, headers=evil, content=b"x").status_code == 403
        assert httpx.get(url, headers=evil).status_code == 200
        same = {**auth(gateway.alice), "Origin": gateway.proxy}
        assert httpx.post(url, headers=same, content=b"x").status_code == 200
        assert httpx.post(url, headers=auth(gateway.alice), content=b"x").status_code == 200
        ws = f"{gateway.proxy}/{job_id}/main/http/ws".replace("http://", "ws://")
        with pytest.raises(WebSocketRefused) as refused, WebSocketSession(ws, headers=evil):
            pass
        assert refused.value.status == 403
        with WebSocketSession(ws, headers=same) as session:
            session.send("same origin")
            assert session.receive() == "same origin"
    finally:
        cancel(gateway, job_id)


def test_another_users_websocket_is_refused_before_its_handshake(gateway: Gateway) -> None:
    job_id = launch(gateway, echo(60, free_port()))
    try:
        serving(gateway, job_id)
        url = f"{gateway.proxy}/{job_id}/main/http/ws".replace("http://", "ws://")
        with (
            pytest.raises(WebSocketRefused) as refused,
            WebSocketSession(url, headers=auth(gateway.bob)),
        ):
            pass
        assert refused.value.status == 404
    finally:
        cancel(gateway, job_id)


def test_one_user_cannot_hold_more_connections_than_allowed(tmp_path: Path) -> None:
    """`proxy_connections_per_user` bounds a user's open proxied connections on a process:
    with one allowed, a WebSocket held open makes the next request 429, and the slot is given
    back when the WebSocket closes."""
    with proxy_gateway(tmp_path / "data", IRI_GATEWAY_PROXY_CONNECTIONS_PER_USER="1") as gateway:
        alice = gateway.alice
        job_id = launch(gateway, echo(60, free_port()))
        try:
            serving(gateway, job_id)
            url = f"{gateway.proxy}/{job_id}/main/http/ws".replace("http://", "ws://")
            with WebSocketSession(url, headers=auth(alice)) as session:
                session.send("held")
                assert session.receive() == "held"
                refused = httpx.get(
                    f"{gateway.proxy}/{job_id}/main/http/ping", headers=auth(alice), timeout=10
                )
                assert refused.status_code == 429, refused.text
                assert "as many as this gateway allows one user (1)" in refused.json()["detail"]
            deadline = time.monotonic() + 10
            while True:  # the slot comes back once the proxy has seen the close
                again = httpx.get(
                    f"{gateway.proxy}/{job_id}/main/http/ping", headers=auth(alice), timeout=10
                )
                if again.status_code == 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert again.status_code == 200, again.text
        finally:
            cancel(gateway, job_id)
