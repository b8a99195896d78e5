"""Signed passes of the port proxy: a link's ticket and a browser's session, and the token a
job's service is shown.

A pass names its kind, owner, job, member, port and expiry, as compact JSON in base64url,
followed by its HMAC-SHA256 under the proxy's key (`keys.py`); it is checked in constant
time and bounded in length before it is decoded, so any replica checks what another signed.
A ticket lives seconds (it travels in a URL: the console's Open link), carries a random
nonce and is exchanged once (`tickets.py`) for a session, which lives in an HttpOnly cookie
scoped to its port's path. The service token is derived from the job's id, so the job's environment
(`IRI_SERVICE_TOKEN`) and the proxy agree on it without storing it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import asdict, dataclass
from typing import Literal

from iri_gateway.errors import GatewayError

Kind = Literal["ticket", "session"]
MAX_PASS_LENGTH = 2048
"""Characters of a pass: far above any real one (owner names are at most 255 characters)."""


class PassRefusedError(GatewayError):
    """A link or session that is malformed, forged, expired or for another port (401)."""

    code = "proxy_pass_refused"


@dataclass(frozen=True)
class Pass:
    """What a ticket or a session grants: `owner`'s access to one port of one member."""

    kind: Kind
    owner: str
    job_id: str
    member: str
    port: str
    expires: float
    nonce: str = ""
    """A ticket's own random id: a ticket is opened once (`tickets.py`)."""


_TEXT_FIELDS = ("kind", "owner", "job_id", "member", "port", "nonce")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, body: str) -> str:
    return _b64(hmac.new(key, body.encode(), hashlib.sha256).digest())


def sign(key: bytes, grant: Pass) -> str:
    body = _b64(json.dumps(asdict(grant), separators=(",", ":")).encode())
    return f"{body}.{_mac(key, body)}"


def check(key: bytes, text: str, kind: Kind, now: float) -> Pass:
    """The pass `text` of kind `kind`, signed with `key` and not expired at `now`;
    PassRefusedError saying which of these it is not."""
    if len(text) > MAX_PASS_LENGTH or text.count(".") != 1:
        raise PassRefusedError(f"this {kind} is malformed")
    body, mac = text.split(".")
    if not hmac.compare_digest(mac.encode(), _mac(key, body).encode()):
        raise PassRefusedError(f"this {kind} is not one the gateway signed")
    try:
        fields = json.loads(_unb64(body))
        grant = Pass(**fields)
        if not all(isinstance(getattr(grant, name), str) for name in _TEXT_FIELDS) or not (
            isinstance(grant.expires, int | float)
        ):
            raise TypeError("a field of the wrong type")
    except (binascii.Error, ValueError, TypeError):
        raise PassRefusedError(f"this {kind} is malformed") from None
    if grant.kind != kind:
        raise PassRefusedError(f"this is a {grant.kind}, not a {kind}")
    if grant.expires <= now:
        raise PassRefusedError(f"this {kind} has expired; open the port again from the gateway")
    return grant


def service_token(key: bytes, job_id: str) -> str:
    """The token job `job_id`'s services are shown (`Authorization: token ...`)."""
    return _mac(key, f"service-token\x00{job_id}")
