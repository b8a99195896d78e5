"""No SSRF: hostile webhook URLs refused, with the field and the reason; the operator's
allow-list lets a network through; the delivery connects to the checked address even when
DNS would answer otherwise afterwards (a rebind), to a real HTTP server on loopback."""

from __future__ import annotations

import contextlib
import ipaddress
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from iri_gateway.service.webhooks import signing
from iri_gateway.service.webhooks.destinations import (
    DestinationPolicy,
    DestinationRefusedError,
    not_public,
)
from iri_gateway.service.webhooks.pinned import MAX_ANSWER_BYTES, post


def resolving(table: dict[str, list[str]]) -> DestinationPolicy:
    """A policy whose DNS answers from `table` (a name -> its addresses)."""

    def resolver(host: str, port: int) -> list[str]:
        if host not in table:
            raise OSError(f"[Errno -2] Name or service not known: {host}")
        return table[host]

    return DestinationPolicy(resolver=resolver)


HOSTILE = [
    ("https://127.0.0.1/hook", "loopback"),
    ("https://127.1.2.3/hook", "loopback"),
    ("https://[::1]/hook", "loopback"),
    ("https://0.0.0.0/hook", "unspecified"),
    ("https://[::]/hook", "unspecified"),
    ("https://169.254.169.254/latest/meta-data/", "link-local"),
    ("https://[fe80::1]/hook", "link-local"),
    ("https://10.1.2.3/hook", "private"),
    ("https://172.16.0.1/hook", "private"),
    ("https://192.168.1.1/hook", "private"),
    ("https://[fd00::1]/hook", "unique-local"),
    ("https://[::ffff:127.0.0.1]/hook", "loopback"),
    ("https://[::ffff:10.0.0.1]/hook", "private"),
    ("https://[::ffff:169.254.169.254]/hook", "link-local"),
    ("https://[2002:7f00:1::]/hook", "loopback"),  # 6to4 of 127.0.0.1
    ("https://[64:ff9b::a9fe:a9fe]/hook", "link-local"),  # NAT64 of 169.254.169.254
    ("https://224.0.0.1/hook", "multicast"),
    ("https://[ff02::1]/hook", "multicast"),
    ("https://240.0.0.1/hook", "reserved"),
    ("https://100.64.0.1/hook", "not a public address"),
    ("https://2130706433/hook", "non-standard form"),  # decimal 127.0.0.1
    ("https://0177.0.0.1/hook", "non-standard form"),  # octal
    ("https://0x7f.0.0.1/hook", "non-standard form"),  # hexadecimal
    ("https://0x7f000001/hook", "non-standard form"),
    ("https://127.1/hook", "non-standard form"),  # short form
    ("https://loopy.example/hook", "resolves to 127.0.0.1: a loopback"),
    ("https://mixed.example/hook", "resolves to 10.0.0.7: a private"),
    ("https://example.org@127.0.0.1/hook", "credentials"),
    ("https://user:pw@example.org/hook", "credentials"),
    ("http://example.org/hook", "plain http:// is not allowed"),
    ("ftp://example.org/hook", "not http(s)"),
    ("https://nowhere.example/hook", "does not resolve"),
]
DNS = {
    "loopy.example": ["127.0.0.1"],
    "mixed.example": ["93.184.215.14", "10.0.0.7"],
    "example.org": ["93.184.215.14"],
}


@pytest.mark.parametrize(("url", "reason"), HOSTILE)
def test_hostile_urls_are_refused_naming_the_field_and_why(url: str, reason: str) -> None:
    with pytest.raises(DestinationRefusedError) as refused:
        resolving(DNS).check(url, "notify.url")
    (problem,) = refused.value.problems
    assert problem.field == "notify.url"
    assert reason in problem.reason, problem


def test_a_public_host_passes_and_keeps_its_checked_address() -> None:
    destination = resolving(DNS).check("https://example.org:8443/hooks?x=1")
    assert (destination.host, destination.port, destination.address) == (
        "example.org",
        8443,
        "93.184.215.14",
    )


def test_the_operators_networks_and_http_hosts_let_a_private_receiver_through() -> None:
    policy = DestinationPolicy(
        allowed_networks=["127.0.0.0/8", "fd00::/8"], http_hosts=["127.0.0.1"]
    )
    assert policy.check("http://127.0.0.1:9/x").address == "127.0.0.1"
    assert policy.check("https://[fd00::5]/x").address == "fd00::5"
    mapped = policy.check("https://[::ffff:127.0.0.5]/x").address
    assert ipaddress.ip_address(mapped) == ipaddress.ip_address("::ffff:127.0.0.5")
    with pytest.raises(DestinationRefusedError, match="plain http"):
        policy.check("http://[fd00::5]/x")  # allowed network, but http only for listed hosts
    with pytest.raises(DestinationRefusedError, match="private"):
        policy.check("https://10.0.0.1/x")


def test_public_addresses_are_public() -> None:
    import ipaddress

    for text in ("93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c", "1.1.1.1"):
        assert not_public(ipaddress.ip_address(text)) is None


class _Receiver(BaseHTTPRequestHandler):
    seen: list[tuple[dict[str, str], bytes]] = []
    answer = 200
    answer_body = b"ok"

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        type(self).seen.append((dict(self.headers), self.rfile.read(length)))
        self.send_response(type(self).answer)
        self.send_header("Content-Length", str(len(type(self).answer_body)))
        if type(self).answer in (301, 302, 307):
            self.send_header("Location", "http://127.0.0.1:1/elsewhere")
        self.end_headers()
        # the gateway reads at most MAX_ANSWER_BYTES and hangs up: as it should
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(type(self).answer_body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[int, type[_Receiver]]]:
    handler = type("Receiver", (_Receiver,), {"seen": [], "answer": 200, "answer_body": b"ok"})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], handler
    server.shutdown()
    server.server_close()


def test_a_dns_rebind_after_the_check_cannot_change_where_it_connects(
    receiver: tuple[int, type[_Receiver]],
) -> None:
    """The name answers the receiver's address at the check, then an unroutable one; the
    POST still reaches the checked address (the name is only the Host header)."""
    port, handler = receiver
    answers = iter([["127.0.0.1"], ["192.0.2.1"]])
    policy = DestinationPolicy(
        allowed_networks=["127.0.0.0/8"],
        http_hosts=["rebind.example"],
        resolver=lambda host, port: next(answers),
    )
    destination = policy.check(f"http://rebind.example:{port}/hook")
    body = b'{"type":"job"}'
    outcome = post(
        destination,
        body,
        signing.headers("s3cret", 1_700_000_000, body, delivery_id="d-1", event_id=7),
        timeout=5,
    )
    assert outcome.delivered, outcome
    ((headers, got),) = handler.seen
    assert got == body
    assert headers["Host"] == f"rebind.example:{port}"
    assert headers["X-IRI-Delivery-ID"] == "d-1"
    assert signing.verify("s3cret", headers["X-IRI-Signature"], got, now=1_700_000_010)
    assert not signing.verify("s3cret", headers["X-IRI-Signature"], got, now=1_700_001_000)
    assert not signing.verify("other", headers["X-IRI-Signature"], got, now=1_700_000_010)
    assert not signing.verify("s3cret", headers["X-IRI-Signature"], got + b" ", now=1_700_000_010)


def test_redirects_are_not_followed_and_big_answers_are_cut(
    receiver: tuple[int, type[_Receiver]],
) -> None:
    port, handler = receiver
    policy = DestinationPolicy(allowed_networks=["127.0.0.0/8"], http_hosts=["127.0.0.1"])
    destination = policy.check(f"http://127.0.0.1:{port}/hook")
    handler.answer = 302
    outcome = post(destination, b"{}", {}, timeout=5)
    assert outcome.status == 302 and outcome.error is not None
    assert "redirect, which is never followed" in outcome.error
    assert len(handler.seen) == 1  # the Location was never asked for
    handler.answer, handler.answer_body = 500, b"x" * (10 * 1024 * 1024)
    outcome = post(destination, b"{}", {}, timeout=5)
    assert outcome.status == 500 and outcome.error is not None
    assert len(outcome.error) < 400  # the start of the answer only
    assert MAX_ANSWER_BYTES < 10 * 1024 * 1024


def test_a_closed_port_is_an_error_recorded_not_raised() -> None:
    from tests.support.serve import free_port

    policy = DestinationPolicy(allowed_networks=["127.0.0.0/8"], http_hosts=["127.0.0.1"])
    outcome = post(policy.check(f"http://127.0.0.1:{free_port()}/"), b"{}", {}, timeout=2)
    assert outcome.status is None and outcome.error is not None
    assert "ConnectError" in outcome.error


def test_a_name_the_system_resolves_to_loopback_is_refused() -> None:
    with pytest.raises(DestinationRefusedError, match=r"localhost resolves to .*loopback"):
        DestinationPolicy().check("https://localhost/hook")
