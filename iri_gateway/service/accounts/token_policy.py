"""A site's limits per token class: how long a token may live and where it may be used from.

NERSC's Superfacility API gives clients that submit a short life and at most two source
ranges, and read-only clients a longer one; a site sets the same here per class (`read`,
`write`: `auth.Access`), for tokens of the tokens file and JWTs alike. A token's own limits
(the networks a file token was issued for, its expiry) hold as well: both must allow it.
Checked at every request (`refusal`), so a tightened setting applies to tokens issued
before it, and when issuing (`lifetime`), so `iri-gateway token` cannot make a token the
site would refuse.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from iri_gateway.errors import GatewayError
from iri_gateway.service.accounts.auth import (
    Access,
    AuthenticationError,
    Principal,
    networks_of,
)


class ReadOnlyTokenError(GatewayError):
    """A token that may only read was used for a request that changes (403)."""

    code = "read_only_token"


@dataclass(frozen=True)
class ClassLimits:
    """One class's limits: the longest life in seconds (None: unbounded) and the networks
    its tokens may be used from (none: anywhere)."""

    lifetime: float | None = None
    networks: tuple[str, ...] = ()


@dataclass(frozen=True)
class TokenPolicy:
    """The limits of each class."""

    read: ClassLimits = ClassLimits()
    write: ClassLimits = ClassLimits()

    @classmethod
    def of(
        cls,
        *,
        read_lifetime: float | None = None,
        write_lifetime: float | None = None,
        read_networks: list[str] | None = None,
        write_networks: list[str] | None = None,
    ) -> TokenPolicy:
        """The policy of these settings (ValueError naming a network that is not one)."""
        return cls(
            ClassLimits(read_lifetime, tuple(networks_of(read_networks or []))),
            ClassLimits(write_lifetime, tuple(networks_of(write_networks or []))),
        )

    def limits(self, access: Access) -> ClassLimits:
        return self.read if access == "read" else self.write

    def lifetime(self, access: Access, asked: float | None) -> float | None:
        """The life of a token of class `access` about to be issued: `asked`, else the
        class's longest; ValueError when `asked` is longer than the class allows."""
        longest = self.limits(access).lifetime
        if asked is not None and asked <= 0:
            raise ValueError("a token's lifetime must be more than 0 seconds")
        if longest is not None and asked is not None and asked > longest:
            raise ValueError(
                f"this site lets a {access} token live {longest:g} s at most "
                f"(setting `{access}_token_lifetime`), not {asked:g} s"
            )
        return asked if asked is not None else longest

    def check(
        self, principal: Principal, client: str | None, now: float, *, changes: str | None
    ) -> None:
        """Refuse `principal`'s token for a request from `client` (its address; None: not
        known) that changes (`changes` says what, as the caller's error names it; None:
        the request only reads): AuthenticationError when the token may not be used here
        now (`refusal`), ReadOnlyTokenError when it may only read."""
        refused = self.refusal(principal, client, now)
        if refused is not None:
            raise AuthenticationError(refused)
        if changes is not None and principal.access == "read":
            raise ReadOnlyTokenError(
                f"{changes} changes state, and the token of user {principal.user!r} may only "
                f"read; {principal.access_hint}"
            )

    def refusal(self, principal: Principal, client: str | None, now: float) -> str | None:
        """Why `principal`'s token may not be used now from the address `client` (None:
        not known), or None when it may. Says nothing of the networks allowed: a stolen
        token's bearer learns nothing from the refusal."""
        limits = self.limits(principal.access)
        if limits.lifetime is not None:
            too_old = _age_refusal(principal, limits.lifetime, now)
            if too_old is not None:
                return too_old
        for allowed, whose in (
            (principal.networks, "the token's"),
            (limits.networks, "the site's"),
        ):
            if allowed and not _inside(client, allowed):
                return (
                    f"the bearer token may not be used from {client or 'an unknown address'} "
                    f"({whose} limit on where a {principal.access} token is used)"
                )
        return None


def _age_refusal(principal: Principal, lifetime: float, now: float) -> str | None:
    """Why `principal`'s token outlives the class's `lifetime`, or None. A token whose
    issue time is not known (a JWT without `iat`, a tokens file entry older than the
    `created` field) is judged by what is left of it; one with neither time is refused:
    its age cannot be told, and a site that bounds lives fails closed."""
    kind = f"a {principal.access} token ({lifetime:g} s)"
    issued, expires = principal.issued, principal.expires
    if issued is not None and expires is not None and expires - issued > lifetime + 1:
        return (
            f"the bearer token lives longer than this site allows {kind}; ask for a "
            "shorter-lived one"
        )
    if issued is not None and now >= issued + lifetime:
        return f"the bearer token is older than this site allows {kind}; ask for a new one"
    if issued is None and expires is None:
        return (
            f"the bearer token's age cannot be told (no issue time, no end), and this site "
            f"bounds the life of {kind}; ask for a new one"
        )
    if issued is None and expires is not None and expires - now > lifetime + 1:
        return (
            f"the bearer token lives longer than this site allows {kind}; ask for a "
            "shorter-lived one"
        )
    return None


def _inside(client: str | None, networks: tuple[str, ...]) -> bool:
    if client is None:
        return False
    try:
        address = ipaddress.ip_address(client)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:10.1.2.3 is 10.1.2.3
    return any(address in ipaddress.ip_network(network) for network in networks)
