"""Whether the caller's token may be used for this request (`TokenPolicy.check`): the
site's limits per token class (its age, the address it comes from), then its class (a token
that may only read is refused every request that changes, `reads.is_read`).

Checked once the token is known and before the request is counted against the caller's
rate or its body read (`deps.get_principal`), so a refused request costs nothing. Too old
or from the wrong place is 401 (the token is not valid here, as an expired one); a read
token asking to change is 403, saying how a token that may change is had.
"""

from __future__ import annotations

import time

from fastapi import Request

from iri_gateway.api.plumbing.reads import is_read
from iri_gateway.service.accounts.auth import Principal
from iri_gateway.service.accounts.token_policy import TokenPolicy


def check_token_use(request: Request, principal: Principal) -> None:
    """AuthenticationError (401) or ReadOnlyTokenError (403) when the token may not serve
    `request`."""
    policy: TokenPolicy = request.app.state.token_policy
    client = request.client.host if request.client is not None else None
    changes = None if is_read(request) else f"{request.method} {request.url.path}"
    policy.check(principal, client, time.time(), changes=changes)
