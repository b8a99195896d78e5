"""A link's ticket opens once: its nonce is recorded in the store when it is exchanged for a
session, on whichever replica, and a second exchange is refused.

A link travels in a URL (the console opens it in a new tab; a user may paste it), so a copy
of it must not open the port again: the first opening wins, as a unique row
(`proxy_tickets.nonce`). Rows are kept until the ticket would have expired anyway, then
deleted by the next exchange, so the table holds at most `proxy_link_ttl` seconds' worth.
"""

from __future__ import annotations

from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError

from iri_gateway.service.operations.schema import ProxyTicketRow
from iri_gateway.service.operations.store import JobStore
from iri_gateway.service.proxy.passes import Pass, PassRefusedError


def spend(store: JobStore, ticket: Pass, now: float) -> None:
    """Record the ticket as opened; PassRefusedError when it was opened before."""
    if not ticket.nonce:
        raise PassRefusedError("this ticket is malformed")
    try:
        with store.writing() as session:
            session.execute(delete(ProxyTicketRow).where(ProxyTicketRow.expires_at < now))
            session.add(ProxyTicketRow(nonce=ticket.nonce, expires_at=ticket.expires))
    except IntegrityError:
        raise PassRefusedError(
            "this link was opened already: a link opens once; ask the gateway for a new one "
            "(the console's Open link, `iri-gateway jobs open`)"
        ) from None
