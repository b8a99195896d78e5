"""The signature of a delivery, and how a receiver checks one.

`X-IRI-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">` with the
subscription's (or the user's notify) secret, the same `t` in `X-IRI-Timestamp`. The time is
inside what is signed, so a receiver that refuses old timestamps refuses replays of old
deliveries, and one that remembers the `X-IRI-Delivery-ID`s it has seen within that
tolerance refuses replays of new ones (docs/rest-api.md, Webhooks).
"""

from __future__ import annotations

import hashlib
import hmac


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of `<timestamp>.<body>` under `secret`."""
    message = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def headers(
    secret: str, timestamp: int, body: bytes, *, delivery_id: str, event_id: int
) -> dict[str, str]:
    """The headers of one attempt of a delivery."""
    return {
        "X-IRI-Event-ID": str(event_id),
        "X-IRI-Delivery-ID": delivery_id,
        "X-IRI-Timestamp": str(timestamp),
        "X-IRI-Signature": f"t={timestamp},v1={signature(secret, timestamp, body)}",
    }


def verify(secret: str, header: str, body: bytes, *, now: float, tolerance: float = 300) -> bool:
    """True when `header` (an `X-IRI-Signature`) signs `body` with `secret` and its time is
    within `tolerance` seconds of `now`: what a receiver does (constant-time compare)."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs(now - timestamp) > tolerance:
        return False
    return hmac.compare_digest(fields.get("v1", ""), signature(secret, timestamp, body))
