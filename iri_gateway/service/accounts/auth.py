"""Bearer tokens: who is calling, and which projects they may charge.

The embedded default is a tokens file (JSON) in the data directory, created on the first
`serve` with one admin token (project `demo`) printed once. Only SHA-256 digests of tokens are
stored, so the file does not hold usable secrets. The file is re-read whenever it changes on
disk, so `iri-gateway token ...` (issue, revoke) takes effect at the next request, without a
restart. In production, `JwtVerifier` checks JWTs against the identity provider's JWKS URL
instead.

A caller may charge only the projects its token grants, and, on a resource whose profile has
`project_rules`, those the rules grant from its claims (`Resource.projects_of`); a token that
grants none, where no rule grants one, may charge none (`ResourceProjects.may_charge`).

Two token classes: a token that may also change (`write`, the default: submit, cancel,
write files) and one that may only read (`read`: status, listings, file contents), as
NERSC's Superfacility API separates its clients. A tokens file entry says `"access": "read"`
(`iri-gateway token USER --read-only`); a JWT is a read token when the gateway names a write
scope (`jwt_write_scope`) that its scope claim lacks. A token may also carry an expiry and the
networks it may be used from (file tokens: `--expires-in`, `--from`; the site's own limits
per class are `token_policy.TokenPolicy`). Which requests change is the API's to say
(`api/plumbing/reads.py`).

One role exists: facility admin (`Principal.admin`), needed by what costs the server real work
for no job, such as the profile check. In the tokens file a token is an admin token when its
entry says `"admin": true` (`iri-gateway token USER --admin`; entries of older files, without
the field, are not); with JWTs, when the token's roles claim holds the configured admin role.
"""

from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import json
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from iri_gateway.errors import GatewayError
from iri_gateway.service.accounts.introspection import Introspection

ID_LENGTH = 12
"""Hex digits of a token's digest shown as its id by `iri-gateway token list`."""


Access = Literal["read", "write"]
"""A token's class: what its bearer may do."""
ACCESS_CLASSES: tuple[Access, ...] = ("read", "write")


class AuthenticationError(GatewayError):
    """No token, or a token the gateway does not know."""

    code = "unauthenticated"


class TokenFileError(GatewayError):
    """The tokens file cannot be read or changed as asked (unreadable, ambiguous id, ...)."""

    code = "token_file"


@dataclass(frozen=True)
class Principal:
    """The authenticated caller, the projects its token grants, and how a project is granted
    (a resource's project rules may grant more there: `Resource.projects_of`).

    `grant_hint` tells a refused caller how an administrator grants a project, and
    `admin_hint` how one grants the admin role (both differ between the tokens file and an
    identity provider).
    """

    user: str
    projects: tuple[str, ...] = ()
    grant_hint: str = ""
    admin: bool = False
    admin_hint: str = ""
    access: Access = "write"
    """`read`: the token may only read; `write`: it may also change."""
    access_hint: str = ""
    """How a token that may change is had, for a read token refused a change."""
    networks: tuple[str, ...] = ()
    """The networks (CIDR) the token may be used from; none: anywhere."""
    issued: float | None = None
    expires: float | None = None
    """When the token was made and stops being valid (POSIX times; None: not known, never)."""
    claims: Mapping[str, Any] = field(default_factory=dict, compare=False)
    """What the identity provider says of the caller (a JWT's claims; a file token's is
    `sub`, its user): the account rules (`models.account_rules`) map them to an account, a
    resource's project rules (`models.project_rules`) to projects there."""


@dataclass(frozen=True)
class TokenEntry:
    """One issued token as the file keeps it: never the token itself, only its digest."""

    id: str
    digest: str
    user: str
    projects: tuple[str, ...]
    created: float | None
    admin: bool = False
    access: Access = "write"
    expires: float | None = None
    networks: tuple[str, ...] = ()


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _token_grant_hint(user: str) -> str:
    return (
        f"an administrator grants a project by issuing a token for it: "
        f"`iri-gateway token {user} --project PROJECT`"
    )


def _token_admin_hint(user: str) -> str:
    return (
        f"an administrator grants the admin role by issuing an admin token: "
        f"`iri-gateway token {user} --admin`"
    )


def _token_access_hint(user: str) -> str:
    return (
        f"this token may only read; an administrator issues one that may also change: "
        f"`iri-gateway token {user}` (without --read-only)"
    )


def _entry(digest: str, entry: dict[str, Any]) -> TokenEntry:
    return TokenEntry(
        digest[:ID_LENGTH],
        digest,
        entry["user"],
        tuple(entry.get("projects", [])),
        entry.get("created"),
        entry.get("admin", False),
        entry.get("access", "write"),
        entry.get("expires"),
        tuple(entry.get("networks", [])),
    )


def _principal(entry: dict[str, Any]) -> Principal:
    user = entry["user"]
    return Principal(
        user,
        tuple(entry.get("projects", [])),
        _token_grant_hint(user),
        admin=entry.get("admin", False),
        admin_hint=_token_admin_hint(user),
        access=entry.get("access", "write"),
        access_hint=_token_access_hint(user),
        networks=tuple(entry.get("networks", [])),
        issued=entry.get("created"),
        expires=entry.get("expires"),
        claims={"sub": user},
    )


def networks_of(values: list[str]) -> list[str]:
    """`values` as CIDR networks in their usual form (`10.1.2.3/8` is `10.0.0.0/8`, a bare
    address its own /32 or /128); ValueError naming the first that is not one."""
    written = []
    for value in values:
        try:
            written.append(str(ipaddress.ip_network(value.strip(), strict=False)))
        except ValueError:
            raise ValueError(
                f"{value!r} is not a network: give an address or a CIDR block such as "
                "10.0.0.0/8 or 2001:db8::/32"
            ) from None
    return written


Signature = tuple[int, int, int]
"""(st_mtime_ns, st_size, st_ino) of the tokens file: any write (an atomic replace gives a
new inode) changes it."""


def _new_token() -> str:
    """A new random token (256 bits, URL-safe), never beginning with '-': tokens are pasted
    as command-line arguments (`iri-gateway token revoke TOKEN`), where one beginning with
    '-' is taken for an option (1 token in 64 would be)."""
    while True:
        token = secrets.token_urlsafe(32)
        if not token.startswith("-"):
            return token


class TokenFile:
    """Tokens by digest: `{"tokens": {sha256: {"user", "projects", "created", "admin"}}}`
    (`admin` is absent from older files: such a token is not an admin token).

    Reads compare the file's signature on every `authenticate` (one `stat`) and re-read it
    when it changed. Writers (`issue`, `revoke`) hold an exclusive lock on `<file>.lock` for
    their read-modify-write, so two CLI processes never lose each other's change, and
    replace the file atomically, so a reader sees the old file or the new one, never half.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: dict[str, Principal] = {}
        self._signature: Signature | None = None
        self._reading = threading.Lock()
        self.reload()

    def _stat(self) -> Signature | None:
        try:
            status = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (status.st_mtime_ns, status.st_size, status.st_ino)

    def reload(self) -> None:
        """Read the file now (missing: no tokens)."""
        with self._reading:
            signature = self._stat()
            document = self._read()
            self._entries = {
                digest: _principal(entry) for digest, entry in document["tokens"].items()
            }
            self._signature = signature

    def _refresh(self) -> None:
        if self._stat() != self._signature:
            self.reload()

    def _read(self) -> dict[str, Any]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {"tokens": {}}
        except OSError as error:
            raise TokenFileError(f"cannot read {self.path}: {error.strerror}") from None
        try:
            document = json.loads(text)
        except json.JSONDecodeError as error:
            raise TokenFileError(
                f"{self.path} is not JSON: {error.msg} at line {error.lineno}"
            ) from None
        tokens = document.get("tokens") if isinstance(document, dict) else None
        if not isinstance(tokens, dict) or not all(
            isinstance(entry, dict) and isinstance(entry.get("user"), str)
            for entry in tokens.values()
        ):
            raise TokenFileError(
                f"{self.path}: expected an object {{'tokens': {{digest: "
                "{'user': ..., 'projects': [...]}}}"
            )
        for digest, entry in tokens.items():
            problem = _entry_problem(entry)
            if problem is not None:
                raise TokenFileError(
                    f"{self.path}: token {digest[:ID_LENGTH]} of {entry['user']!r}: {problem}"
                )
        return {"tokens": tokens}

    def authenticate(self, token: str | None) -> Principal:
        if not token:
            raise AuthenticationError("a bearer token is required")
        self._refresh()
        principal = self._entries.get(_digest(token))
        if principal is None:
            raise AuthenticationError("the bearer token is not valid")
        if principal.expires is not None and time.time() >= principal.expires:
            raise AuthenticationError("the bearer token has expired; ask for a new one")
        return principal

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        """The file's document, to change in place; written back atomically on exit."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        lock = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            document = self._read()
            yield document
            self._write(document)
        finally:
            os.close(lock)  # releases the lock
        self.reload()

    def _write(self, document: dict[str, Any]) -> None:
        handle, temporary = tempfile.mkstemp(
            prefix=self.path.name + ".", suffix=".tmp", dir=self.path.parent
        )
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                os.fchmod(stream.fileno(), 0o600)
                stream.write(json.dumps(document, indent=2))
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def issue(
        self,
        user: str,
        projects: list[str] | None = None,
        *,
        admin: bool = False,
        access: Access = "write",
        lifetime: float | None = None,
        networks: list[str] | None = None,
    ) -> str:
        """Create a token for `user` (an admin token with `admin`; one that may only read
        with `access="read"`; valid `lifetime` seconds, from `networks` only, when given),
        store its digest, and return the token (shown once)."""
        token = _new_token()
        now = time.time()
        entry: dict[str, Any] = {
            "user": user,
            "projects": list(dict.fromkeys(projects or [])),
            "created": now,
            "admin": admin,
            "access": access,
        }
        if lifetime is not None:
            entry["expires"] = now + lifetime
        if networks:
            entry["networks"] = networks_of(networks)
        problem = _entry_problem(entry)
        if problem is not None:
            raise TokenFileError(problem)
        with self._locked() as document:
            document["tokens"][_digest(token)] = entry
        return token

    def entries(self) -> list[TokenEntry]:
        """Every issued token, oldest first (tokens of older files have no creation time)."""
        listed = [_entry(digest, entry) for digest, entry in self._read()["tokens"].items()]
        return sorted(listed, key=lambda e: (e.created is None, e.created or 0.0))

    def revoke(
        self, *, token_or_id: str | None = None, user: str | None = None
    ) -> list[TokenEntry]:
        """Remove the token given (itself, or its id from `entries`) and/or every token of
        `user`; the removed entries are returned (none: nothing matched)."""
        if token_or_id is None and user is None:
            raise TokenFileError("name a token (the token or its id) or a user to revoke")
        with self._locked() as document:
            tokens: dict[str, Any] = document["tokens"]
            chosen: set[str] = set()
            if token_or_id is not None:
                chosen = {
                    d
                    for d in tokens
                    if d == _digest(token_or_id)
                    or (len(token_or_id) >= ID_LENGTH and d.startswith(token_or_id))
                }
                if len(chosen) > 1:
                    raise TokenFileError(
                        f"{token_or_id!r} matches {len(chosen)} tokens; give more of the id"
                    )
            if user is not None:
                matching = {d for d, entry in tokens.items() if entry["user"] == user}
                chosen = matching if token_or_id is None else chosen & matching
            removed = [_entry(d, tokens[d]) for d in sorted(chosen)]
            for digest in chosen:
                del tokens[digest]
        return removed

    def __len__(self) -> int:
        self._refresh()
        return len(self._entries)

    may_block = False
    """One `stat` of the file, a read when it changed: quick, done on the event loop."""


class Authenticator(Protocol):
    """Turns a bearer token into a principal, or raises AuthenticationError. `may_block`:
    whether `authenticate` may wait on the network (then it runs off the event loop)."""

    may_block: bool

    def authenticate(self, token: str | None) -> Principal:
        """The caller behind `token`."""


@dataclass(frozen=True)
class ClaimRules:
    """How an identity provider's claims make a principal, for JWTs and for the answers of
    its introspection endpoint alike: the user from one claim, the projects from another (a
    list, or a space/comma separated string), an admin when the roles claim (same forms; a
    dotted name such as `realm_access.roles` reaches into nested objects, as Keycloak nests
    them) holds `admin_role` (without one, nobody is), and a token that may change only when
    `write_scope` (None: every token may) is in the scope claim."""

    username_claim: str = "sub"
    projects_claim: str = "projects"
    roles_claim: str = "roles"
    admin_role: str | None = None
    scope_claim: str = "scope"
    write_scope: str | None = None

    def principal(self, claims: dict[str, Any]) -> Principal:
        """The caller `claims` describe; AuthenticationError when they name no user."""
        user = claims.get(self.username_claim)
        if not isinstance(user, str) or not user:
            raise AuthenticationError(f"the token has no {self.username_claim!r} claim")
        writes = self.write_scope is None or self.write_scope in _names(
            _claim(claims, self.scope_claim)
        )
        return Principal(
            user,
            _names(claims.get(self.projects_claim)),
            f"projects come from the token's {self.projects_claim!r} claim, which the "
            "identity provider's administrator grants",
            admin=self.admin_role is not None
            and self.admin_role in _names(_claim(claims, self.roles_claim)),
            admin_hint=self._admin_hint(),
            access="write" if writes else "read",
            access_hint=(
                f"this token may only read: its {self.scope_claim!r} claim lacks "
                f"{self.write_scope!r}, which the identity provider grants to clients that "
                "may submit and change"
            ),
            issued=_time(claims.get("iat")),
            expires=_time(claims.get("exp")),
            claims=claims,
        )

    def _admin_hint(self) -> str:
        if self.admin_role is None:
            return (
                "this gateway names no admin role for its identity provider's tokens; "
                "its operator sets IRI_GATEWAY_JWT_ADMIN_ROLE"
            )
        return (
            f"the admin role comes from the token's {self.roles_claim!r} claim holding "
            f"{self.admin_role!r}, which the identity provider's administrator grants"
        )


def audience_refusal(audiences: list[Any], audience: str, *, exact: bool) -> str | None:
    """Why a token whose `aud` lists `audiences` is not for this gateway (`audience`), or
    None; `exact`: it must be for this gateway alone (the AmSC rule)."""
    if audience not in audiences:
        return (
            f"the bearer token is not meant for this gateway (its audience is not "
            f"{audience!r}); ask the identity provider for a token for it"
        )
    if exact and audiences != [audience]:
        return (
            f"the bearer token is meant for other services besides this gateway "
            f"({len(audiences)} audiences); ask the identity provider for a token whose "
            f"audience is {audience!r} alone"
        )
    return None


class JwtVerifier:
    """Production auth: JWTs signed by the site's identity provider, keys from its JWKS URL.

    The signature (RS/ES/PS algorithms only, never `none` or HMAC), expiry, issuer and
    audience are checked; the caller is made by the site's `ClaimRules`. Keys are cached by
    PyJWT's JWKS client and refetched when an unknown key id appears.
    """

    ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "PS256", "PS384", "PS512")

    def __init__(
        self,
        *,
        jwks_url: str,
        issuer: str,
        audience: str,
        rules: ClaimRules | None = None,
        exact_audience: bool = False,
        leeway: float = 0.0,
        introspection: Introspection | None = None,
    ) -> None:
        """`exact_audience`: the token's `aud` must be this gateway's audience alone (a
        token minted for several services is refused). `leeway`: seconds of clock skew
        allowed on `exp`, `nbf` and `iat`. `introspection`: the identity provider asked
        whether the token is still active (revocation), refusing when it cannot answer."""
        import jwt

        self._jwt = jwt
        self._keys = jwt.PyJWKClient(jwks_url, cache_keys=True, lifespan=300)
        self.issuer, self.audience = issuer, audience
        self.rules = rules or ClaimRules()
        self.exact_audience, self.leeway = exact_audience, leeway
        self.introspection = introspection

    may_block = True
    """Fetching keys and asking the provider are network calls: not on the event loop."""

    def authenticate(self, token: str | None) -> Principal:
        if not token:
            raise AuthenticationError("a bearer token is required")
        jwt = self._jwt
        try:
            key = self._keys.get_signing_key_from_jwt(token)
            claims = jwt.decode(
                token,
                key.key,
                algorithms=list(self.ALGORITHMS),
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWKClientConnectionError as error:
            raise AuthenticationError(
                f"cannot fetch the identity provider's keys: {error}"
            ) from None
        except jwt.PyJWTError as error:
            raise AuthenticationError(f"the bearer token is not valid: {error}") from None
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        refused = audience_refusal(audiences, self.audience, exact=self.exact_audience)
        if refused is not None:
            raise AuthenticationError(refused)
        principal = self.rules.principal(claims)
        if self.introspection is not None and not self.introspection.active(token):
            raise AuthenticationError(
                "the identity provider says the bearer token is no longer active (revoked, "
                "or ended); sign in again"
            )
        return principal


def _claim(claims: dict[str, Any], name: str) -> Any:
    """The claim `name`; a dotted name reaches into nested objects (`realm_access.roles`)."""
    value: Any = claims
    for part in name.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _time(value: Any) -> float | None:
    """A NumericDate claim (`iat`, `exp`) as a POSIX time; None when absent or not one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _entry_problem(entry: dict[str, Any]) -> str | None:
    """What is wrong with a tokens file entry's optional fields, or None."""
    if not isinstance(entry.get("admin", False), bool):
        return f"'admin' must be true or false, not {entry['admin']!r}"
    if entry.get("access", "write") not in ACCESS_CLASSES:
        return f"'access' must be 'read' or 'write', not {entry['access']!r}"
    expires = entry.get("expires")
    if expires is not None and (isinstance(expires, bool) or not isinstance(expires, int | float)):
        return f"'expires' must be a POSIX time, not {expires!r}"
    networks = entry.get("networks", [])
    if not isinstance(networks, list) or not all(isinstance(n, str) for n in networks):
        return f"'networks' must be a list of CIDR blocks, not {networks!r}"
    try:
        networks_of(networks)
    except ValueError as error:
        return f"'networks': {error}"
    return None


def _names(value: Any) -> tuple[str, ...]:
    """A claim listing names: a list, or a space/comma separated string; anything else none."""
    if isinstance(value, str):
        return tuple(p for p in value.replace(",", " ").split() if p)
    if isinstance(value, list):
        return tuple(str(p) for p in value)
    return ()
