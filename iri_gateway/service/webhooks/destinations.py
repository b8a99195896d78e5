"""Where a webhook may go: the operator's rules, checked on the addresses the host resolves to.

Why: the gateway runs inside a facility's network; a webhook URL is a request the gateway
makes on a user's behalf, so without these rules a user could make it call the cloud
metadata service (169.254.169.254), the database, or anything on loopback (SSRF).

A URL is judged in two steps. Its text: `https://` (or `http://` for a host the operator
lists in `webhook_http_hosts`), no credentials, and no IPv4 address in a form other than
`a.b.c.d` (decimal `2130706433`, octal `0177.0.0.1`, hex `0x7f.1`: C resolvers read them
as addresses, and they exist only to fool a filter). Then every address the host resolves
to: each must be public — not loopback, private, link-local, unique-local, multicast,
reserved, unspecified or shared (IPv4-mapped IPv6 judged as its IPv4 address, 6to4 and
Teredo by the IPv4 address they carry) — unless it lies in a network of
`webhook_allowed_networks`. One refused address refuses the URL (a name resolving to a
public and a private address is a rebinding attempt as likely as not). The delivery then
connects to the address checked here and nowhere else (`pinned.py`), so a DNS answer that
changes between the check and the connection cannot win.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from urllib.parse import urlsplit

from iri_gateway.errors import GatewayError, Problem

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], list[str]]
"""host, port -> the addresses it resolves to (as text)."""

_NUMERIC_HOST = re.compile(r"^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+))*\.?$", re.IGNORECASE)
_DOTTED_QUAD = re.compile(
    r"^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$"
)


class DestinationRefusedError(GatewayError):
    """A webhook URL the operator's rules do not let the gateway call (400 at registration;
    a delivery's failure reason at delivery time)."""

    code = "webhook_destination_refused"

    def __init__(self, field: str, reason: str, offered: str | None = None) -> None:
        self.problems = [Problem(field, reason, offered)]
        self.reason = reason
        super().__init__(f"{field}: {reason}" + (f" ({offered})" if offered else ""))


class DestinationUnresolvedError(GatewayError):
    """The URL's host did not resolve within the time allowed (503: try again)."""

    code = "webhook_destination_unresolved"
    retry_after = 5


@dataclass(frozen=True)
class Destination:
    """A URL judged sendable: where to connect (`address`, the one checked) and what to
    say (`host` for the Host header and TLS, `port`)."""

    url: str
    scheme: str
    host: str
    port: int
    address: str


def system_resolver(host: str, port: int) -> list[str]:
    """The addresses `getaddrinfo` gives for `host` (TCP), in its order, once each."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def not_public(address: Address) -> str | None:
    """Why `address` is not a public unicast address (None: it is)."""
    if isinstance(address, ipaddress.IPv6Address):
        mapped = address.ipv4_mapped or address.sixtofour or (address.teredo or (None, None))[1]
        if mapped is not None:
            why = not_public(mapped)
            return f"{why} (as {mapped}, inside {address})" if why else None
        if address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
            why = not_public(embedded)
            return f"{why} (as {embedded}, inside {address})" if why else None
    checks = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("reserved", address.is_reserved),
        ("unique-local" if address.version == 6 else "private", address.is_private),
        ("site-local", address.version == 6 and address.is_site_local),
    )
    for name, hit in checks:
        if hit:
            return f"a {name} address"
    if not address.is_global:
        return "not a public address (shared or special-purpose)"
    return None


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class DestinationPolicy:
    """The operator's rules for webhook URLs (settings `webhook_allowed_networks`,
    `webhook_http_hosts`), with the resolver to use and how long it may take."""

    def __init__(
        self,
        *,
        allowed_networks: Sequence[str] = (),
        http_hosts: Sequence[str] = (),
        resolver: Resolver = system_resolver,
        resolve_timeout: float = 5.0,
    ) -> None:
        self.allowed: list[Network] = [
            ipaddress.ip_network(network, strict=False) for network in allowed_networks
        ]
        self.http_hosts = {host.strip("[]").lower() for host in http_hosts}
        self._resolver = resolver
        self._timeout = resolve_timeout
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="webhook-dns")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def check(self, url: str, field: str = "url") -> Destination:
        """The destination of `url` if the rules allow it; DestinationRefusedError naming
        `field` and why not; DestinationUnresolvedError when DNS did not answer in time."""
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if not host:
            raise DestinationRefusedError(field, "the URL names no host")
        if parts.username is not None or parts.password is not None or "@" in parts.netloc:
            raise DestinationRefusedError(field, "credentials in the URL are not allowed")
        if parts.scheme == "http" and host not in self.http_hosts:
            raise DestinationRefusedError(
                field,
                "plain http:// is not allowed for this host",
                "https://, or an operator may list the host in webhook_http_hosts",
            )
        if parts.scheme not in ("http", "https"):
            raise DestinationRefusedError(field, f"scheme {parts.scheme!r} is not http(s)")
        if _NUMERIC_HOST.match(host) and not _DOTTED_QUAD.match(host):
            raise DestinationRefusedError(
                field,
                f"host {host!r} is an IPv4 address in a non-standard form (decimal, octal or "
                "hexadecimal)",
                "write it as a.b.c.d",
            )
        port = parts.port or (443 if parts.scheme == "https" else 80)
        addresses = self._addresses(host, port, field)
        for address in addresses:
            self.judge(address, host, field)
        return Destination(url, parts.scheme, host, port, str(addresses[0]))

    def judge(self, address: Address, host: str, field: str) -> None:
        """Refuse `address` (of `host`) unless public or in an allowed network."""
        forms: list[Address] = [address]
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            forms.append(address.ipv4_mapped)  # ::ffff:10.0.0.1 is 10.0.0.1
        if any(form in network for form in forms for network in self.allowed):
            return
        why = not_public(address)
        if why is not None:
            shown = host if host == str(address) else f"{host} resolves to {address}"
            raise DestinationRefusedError(
                field,
                f"{shown}: {why}; webhooks go to public addresses only",
                "a public host, or an operator may allow the network in webhook_allowed_networks",
            )

    def _addresses(self, host: str, port: int, field: str) -> list[Address]:
        try:
            return [ipaddress.ip_address(host)]
        except ValueError:
            pass
        future = self._pool.submit(self._resolver, host, port)
        try:
            texts = future.result(timeout=self._timeout)
        except FutureTimeout:
            future.cancel()
            raise DestinationUnresolvedError(
                f"{field}: the host {host!r} did not resolve within {self._timeout:g} s; "
                "try again later"
            ) from None
        except (OSError, UnicodeError) as error:
            raise DestinationRefusedError(
                field, f"the host {host!r} does not resolve ({error})"
            ) from None
        addresses = []
        for text in texts:
            try:
                addresses.append(ipaddress.ip_address(text.split("%", 1)[0]))
            except ValueError:
                continue
        if not addresses:
            raise DestinationRefusedError(field, f"the host {host!r} resolves to no address")
        return addresses
