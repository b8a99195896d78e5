"""The gateway's own keys, kept in the store so that every replica signs and checks alike.

A key is made by the first replica that needs it (random, 32 bytes) and never changes after:
two replicas making it at once insert the same name, and the loser reads the winner's.
Rotating one means deleting its row (every link and session signed with it then fails).
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable

from sqlalchemy.exc import IntegrityError

from iri_gateway.service.operations.schema import GatewayKeyRow
from iri_gateway.service.operations.store import JobStore

KEY_BYTES = 32


def gateway_key(store: JobStore, name: str, clock: Callable[[], float]) -> bytes:
    """The key `name`, made now if the store has none."""
    for _attempt in range(3):
        with store.writing() as session:
            row = session.get(GatewayKeyRow, name)
            if row is not None:
                return base64.urlsafe_b64decode(row.secret)
        made = base64.urlsafe_b64encode(secrets.token_bytes(KEY_BYTES)).decode()
        try:
            with store.writing() as session:
                session.add(GatewayKeyRow(name=name, secret=made, created_at=clock()))
        except IntegrityError:
            continue  # another replica made it first: read theirs
        return base64.urlsafe_b64decode(made)
    raise RuntimeError(f"the gateway key {name!r} could neither be read nor made")
