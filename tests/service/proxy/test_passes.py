"""Tickets and sessions of the port proxy: signed, bounded, expiring, one kind each."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest

from iri_gateway.service.proxy.passes import (
    MAX_PASS_LENGTH,
    Pass,
    PassRefusedError,
    check,
    service_token,
    sign,
)

KEY = b"k" * 32
GRANT = Pass("ticket", "alice", "job-1", "main", "http", expires=1000.0)


def test_a_signed_pass_is_read_back() -> None:
    assert check(KEY, sign(KEY, GRANT), "ticket", now=999.0) == GRANT


def test_an_expired_pass_is_refused() -> None:
    with pytest.raises(PassRefusedError, match="expired"):
        check(KEY, sign(KEY, GRANT), "ticket", now=1000.0)


def test_another_key_and_any_change_are_refused() -> None:
    with pytest.raises(PassRefusedError, match="not one the gateway signed"):
        check(b"x" * 32, sign(KEY, GRANT), "ticket", now=0)
    body, mac = sign(KEY, GRANT).split(".")
    fields = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    fields["owner"] = "mallory"
    forged = base64.urlsafe_b64encode(json.dumps(fields).encode()).rstrip(b"=").decode()
    with pytest.raises(PassRefusedError, match="not one the gateway signed"):
        check(KEY, f"{forged}.{mac}", "ticket", now=0)


def test_a_ticket_is_not_a_session() -> None:
    """A link's ticket (it travels in URLs) never serves as the cookie's session."""
    with pytest.raises(PassRefusedError, match="not a session"):
        check(KEY, sign(KEY, GRANT), "session", now=0)


@pytest.mark.parametrize(
    "text", ["", "no-dot", "a.b.c", "." * 3, "x" * (MAX_PASS_LENGTH + 1), "%%%.%%%"]
)
def test_malformed_passes_are_refused_without_decoding(text: str) -> None:
    with pytest.raises(PassRefusedError):
        check(KEY, text, "ticket", now=0)


def test_a_signed_body_that_is_not_a_pass_is_refused() -> None:
    """Even a body the key signed must have the fields of a pass (a 401, never a 500)."""
    body = base64.urlsafe_b64encode(b'{"owner": "alice"}').rstrip(b"=").decode()
    mac = sign(KEY, GRANT).split(".")[1]  # wrong mac first: refused as unsigned
    with pytest.raises(PassRefusedError):
        check(KEY, f"{body}.{mac}", "ticket", now=0)


def test_service_tokens_differ_per_job_and_key() -> None:
    assert service_token(KEY, "a") == service_token(KEY, "a")
    assert service_token(KEY, "a") != service_token(KEY, "b")
    assert service_token(KEY, "a") != service_token(b"y" * 32, "a")
    assert len(service_token(KEY, "a")) >= 43  # 256 bits, base64url


def test_a_pass_with_fields_of_the_wrong_type_is_refused() -> None:
    """Fields are typed before use: a signed body whose owner is a number is no pass."""
    body = (
        base64.urlsafe_b64encode(
            json.dumps(
                {
                    "kind": "ticket",
                    "owner": 7,
                    "job_id": "j",
                    "member": "main",
                    "port": "p",
                    "expires": 10.0,
                    "nonce": "n",
                }
            ).encode()
        )
        .rstrip(b"=")
        .decode()
    )
    mac = base64.urlsafe_b64encode(hmac.new(KEY, body.encode(), hashlib.sha256).digest())
    with pytest.raises(PassRefusedError, match="malformed"):
        check(KEY, f"{body}.{mac.rstrip(b'=').decode()}", "ticket", now=0)
