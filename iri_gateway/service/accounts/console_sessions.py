"""The console's signed-in sessions and its sign-in attempts, kept in the store so that every
replica knows them: a sign-in may start on one replica and come back on another, and a
sign-out ends the session on all of them at once.

A session's cookie holds two random values, `<id>.<key>`: the store keeps the id's SHA-256
only, and the session's access token sealed (AES-256-GCM) with the key, which only the
browser holds. So the store's rows are useless to whoever reads them (a backup, a leaked
dump), and the cookie alone is useless once its row is gone. A session also has a CSRF token
(the console sends it in `X-CSRF-Token` with every change; only its digest is kept), and ends
at the earlier of the site's session lifetime and its access token's end.

An attempt is kept under its state's digest with the browser's binding (a random value in a
cookie of the browser that began it; only its digest is kept): a callback from another
browser, with a code and state it was lured into carrying, finds no attempt of its own
(login CSRF). An attempt is used once, and both tables are swept of what has ended.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import delete, func, select
from sqlalchemy.orm import sessionmaker

from iri_gateway.errors import GatewayError
from iri_gateway.service.accounts.openid_sign_in import Attempt
from iri_gateway.service.operations.schema import ConsoleSessionRow, SignInAttemptRow
from iri_gateway.service.operations.store import JobStore

NONCE_BYTES = 12
"""AES-GCM's nonce."""
PENDING_ATTEMPTS = 10_000
"""Sign-ins under way at most (begun, not finished, not ended): beginning one needs no
account, so a flood of them must not grow the store without bound."""


class TooManyAttemptsError(GatewayError):
    """Too many sign-ins are under way at once (503, retry in a minute)."""

    code = "too_many_sign_ins"
    retry_after = 60


@dataclass(frozen=True)
class OpenedSession:
    """What the browser is given for a new session: the cookie's value and the CSRF token."""

    cookie: str
    csrf: str
    expires: float


@dataclass(frozen=True)
class ConsoleSession:
    """A live session: whose it is, its access token (unsealed), until when, and the
    digest of its CSRF token."""

    user: str
    access_token: str
    id_token: str
    expires: float
    csrf_digest: str

    def csrf_matches(self, csrf: str | None) -> bool:
        """Whether `csrf` (the request's `X-CSRF-Token`) is this session's."""
        return csrf is not None and secrets.compare_digest(_digest(csrf), self.csrf_digest)


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _seal(key: bytes, text: str, context: str) -> str:
    nonce = secrets.token_bytes(NONCE_BYTES)
    sealed = AESGCM(key).encrypt(nonce, text.encode(), context.encode())
    return base64.urlsafe_b64encode(nonce + sealed).decode()


def _unseal(key: bytes, sealed: str, context: str) -> str | None:
    try:
        raw = base64.urlsafe_b64decode(sealed)
        return AESGCM(key).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], context.encode()).decode()
    except (InvalidTag, ValueError):
        return None


def _split(cookie: str) -> tuple[str, bytes] | None:
    """A cookie's id and key; None when it is not one of ours."""
    identifier, _, key = cookie.partition(".")
    try:
        raw = base64.urlsafe_b64decode(key + "=" * (-len(key) % 4))
    except ValueError:
        return None
    if len(identifier) < 40 or len(raw) != 32:
        return None
    return identifier, raw


class ConsoleSessions:
    """Sessions and attempts in `store`'s tables (`console_sessions`, `sign_in_attempts`)."""

    def __init__(self, store: JobStore, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._reads = sessionmaker(store.engine, expire_on_commit=False)
        self._clock = clock

    def save_attempt(self, attempt: Attempt) -> str:
        """Keep `attempt`; the binding to give the browser that begins it (a cookie)."""
        binding = secrets.token_urlsafe(32)
        now = self._clock()
        with self._store.writing() as session:
            session.execute(delete(SignInAttemptRow).where(SignInAttemptRow.expires_at < now))
            pending = session.scalar(select(func.count()).select_from(SignInAttemptRow)) or 0
            if pending >= PENDING_ATTEMPTS:
                raise TooManyAttemptsError(
                    f"{pending} sign-ins are under way, as many as this gateway keeps; try "
                    "again in a minute"
                )
            session.add(
                SignInAttemptRow(
                    state_digest=_digest(attempt.state),
                    binding_digest=_digest(binding),
                    nonce=attempt.nonce,
                    verifier=attempt.verifier,
                    next_page=attempt.next_page,
                    expires_at=attempt.expires,
                )
            )
        return binding

    def take_attempt(self, state: str, binding: str | None) -> Attempt | None:
        """The attempt of `state` begun by the browser holding `binding`, removed (an attempt
        is finished once); None when there is none, it ended, or another browser began it."""
        now = self._clock()
        attempts = SignInAttemptRow
        with self._store.writing() as session:
            # One DELETE ... RETURNING decides: of two callbacks racing on two replicas, only
            # the one whose delete removed the row gets it (a read, then a delete, would let
            # both read it first).
            row = session.execute(
                delete(attempts)
                .where(attempts.state_digest == _digest(state))
                .returning(
                    attempts.binding_digest,
                    attempts.nonce,
                    attempts.verifier,
                    attempts.next_page,
                    attempts.expires_at,
                )
            ).one_or_none()
        if row is None:
            return None
        if (
            binding is None
            or not secrets.compare_digest(_digest(binding), row.binding_digest)
            or row.expires_at <= now
        ):
            return None
        return Attempt(state, row.nonce, row.verifier, row.next_page, row.expires_at)

    def open(
        self,
        user: str,
        access_token: str,
        id_token: str,
        token_expires: float | None,
        *,
        lifetime: float,
    ) -> OpenedSession:
        """A new session of `user` with its tokens; it ends after `lifetime` seconds or when
        the access token does, whichever is first."""
        now = self._clock()
        expires = now + lifetime if token_expires is None else min(now + lifetime, token_expires)
        identifier = secrets.token_urlsafe(32)
        key = secrets.token_bytes(32)
        csrf = secrets.token_urlsafe(32)
        digest = _digest(identifier)
        with self._store.writing() as session:
            session.execute(delete(ConsoleSessionRow).where(ConsoleSessionRow.expires_at < now))
            session.add(
                ConsoleSessionRow(
                    id_digest=digest,
                    user=user[:255],
                    sealed_access_token=_seal(key, access_token, digest),
                    sealed_id_token=_seal(key, id_token, digest + ":id"),
                    csrf_digest=_digest(csrf),
                    created_at=now,
                    expires_at=expires,
                )
            )
        cookie = f"{identifier}.{base64.urlsafe_b64encode(key).decode().rstrip('=')}"
        return OpenedSession(cookie, csrf, expires)

    def find(self, cookie: str) -> ConsoleSession | None:
        """The live session of `cookie`; None when it is unknown, ended or forged."""
        parts = _split(cookie)
        if parts is None:
            return None
        identifier, key = parts
        digest = _digest(identifier)
        with self._reads() as session:
            row = session.scalars(
                select(ConsoleSessionRow).where(ConsoleSessionRow.id_digest == digest)
            ).one_or_none()
        if row is None or row.expires_at <= self._clock():
            return None
        access = _unseal(key, row.sealed_access_token, digest)
        id_token = _unseal(key, row.sealed_id_token, digest + ":id")
        if access is None or id_token is None:
            return None
        return ConsoleSession(row.user, access, id_token, row.expires_at, row.csrf_digest)

    def close(self, cookie: str) -> bool:
        """End the session of `cookie` on every replica; whether there was one."""
        parts = _split(cookie)
        if parts is None:
            return False
        with self._store.writing() as session:
            result = session.execute(
                delete(ConsoleSessionRow).where(ConsoleSessionRow.id_digest == _digest(parts[0]))
            )
        return bool(getattr(result, "rowcount", 0))
