"""The console session's cookies, and the caller they stand for.

Three cookies, all `SameSite=Strict` but the attempt's, on the console's origin (path `/`):
- the session (`iri-session`): HttpOnly, so no script reads it, not even the console's;
- its CSRF token (`iri-csrf`): readable by the console's scripts, which send it back in
  `X-CSRF-Token` with every request that is not a GET or HEAD; another site can neither
  read it nor set that header, so a forged form or script on another origin cannot change
  anything with the session (double submit, the token also checked against the session's);
- the sign-in attempt's binding (`iri-sign-in`): HttpOnly, `SameSite=Lax`, because it must
  come back with the provider's redirect to the callback (a cross-site navigation).
On an https `public_url` every name takes the `__Host-` prefix and the Secure flag, so no
other host (a sibling subdomain) and no plain-http page can set or overwrite them.

A request with a bearer token is the token's, cookies or not; a request with only the
session cookie is the session's access token's, checked by the same authenticator as a
bearer token (expiry, audience, revocation): one identity for the console and the API.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from iri_gateway.api.plumbing.problems import ApiProblem
from iri_gateway.service.accounts.auth import AuthenticationError, Authenticator, Principal
from iri_gateway.service.accounts.console_sessions import ConsoleSession, ConsoleSessions

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CSRF_HEADER = "X-CSRF-Token"
CONSOLE_COOKIES = frozenset(
    f"{prefix}iri-{name}" for prefix in ("", "__Host-") for name in ("session", "csrf", "sign-in")
)
"""Every name the console's cookies may have: the port proxy never passes them on."""
SECURITY_SCHEME = {
    "type": "apiKey",
    "in": "cookie",
    "name": "iri-session",
    "description": "The web console's session after an OpenID Connect sign-in (only when the "
    "gateway sets `openid_issuer`): an HttpOnly cookie, `__Host-iri-session` on an https "
    "`public_url`, accepted in place of `HTTPBearer` by every operation that lists it (not "
    "listed there itself: it is the console's, not a client's). A request that is not a GET "
    "or HEAD must also carry the session's CSRF token in `X-CSRF-Token` (403 without it). A "
    "bearer token, when sent, is used instead.",
}
"""The session cookie as an OpenAPI security scheme (`consoleSession`)."""


@dataclass(frozen=True)
class CookieNames:
    """The cookies' names and flags for a console served over http or https."""

    secure: bool

    def _name(self, base: str) -> str:
        return f"__Host-{base}" if self.secure else base

    @property
    def session(self) -> str:
        return self._name("iri-session")

    @property
    def csrf(self) -> str:
        return self._name("iri-csrf")

    @property
    def attempt(self) -> str:
        return self._name("iri-sign-in")

    def set(
        self, name: str, value: str, max_age: int, *, http_only: bool = True, lax: bool = False
    ) -> str:
        """A `Set-Cookie` value for `name`."""
        flags = [f"{name}={value}", "Path=/", f"Max-Age={max(max_age, 0)}"]
        flags += ["HttpOnly"] if http_only else []
        flags += ["SameSite=Lax" if lax else "SameSite=Strict"]
        flags += ["Secure"] if self.secure else []
        return "; ".join(flags)

    def clear(self, name: str) -> str:
        """A `Set-Cookie` value that removes `name`."""
        return self.set(name, "", 0)


def cookie_names(request: Request) -> CookieNames:
    public_url: str | None = request.app.state.settings.public_url
    return CookieNames(secure=public_url is not None and public_url.startswith("https:"))


def session_cookie(request: Request) -> str | None:
    """The console session's cookie the request carries, if any (only when sign-in by
    OpenID is on: otherwise no cookie is ever an identity)."""
    if request.app.state.openid is None:
        return None
    return request.cookies.get(cookie_names(request).session) or None


def require_csrf(request: Request, session: ConsoleSession, what: str) -> None:
    """403 unless `request` carries `session`'s CSRF token (`what` names the request)."""
    if not session.csrf_matches(request.headers.get(CSRF_HEADER)):
        raise ApiProblem(
            403,
            "Forbidden",
            f"{what} needs the console's {CSRF_HEADER} header beside its session cookie (the "
            "console sends it; another site cannot)",
        )


async def session_principal(request: Request, cookie: str) -> Principal:
    """The caller of a request that carries the console session's cookie and no bearer
    token: its session's access token, authenticated as a bearer token would be. 401 when
    the session has ended; 403 when a request that may change lacks the CSRF token."""
    sessions: ConsoleSessions = request.app.state.engine.console_sessions
    authenticator: Authenticator = request.app.state.authenticator

    def check() -> Principal:
        session = sessions.find(cookie)
        if session is None:
            raise AuthenticationError(
                "the console session has ended (signed out, expired, or ended by an "
                "administrator); sign in again"
            )
        if request.method not in SAFE_METHODS:
            require_csrf(request, session, "a request that may change")
        return authenticator.authenticate(session.access_token)

    return await run_in_threadpool(check)
