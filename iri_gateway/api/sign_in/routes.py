"""The console's OpenID Connect sign-in (`openid_issuer` set): begin, the provider's callback,
what the sign-in page needs to know, and sign-out.

- `GET /console/sign-in/openid?next=PAGE` sends the browser to the provider with a new
  attempt (`service.accounts.openid_sign_in`), bound to this browser by a cookie;
- `GET /console/sign-in/callback` finishes it: the code exchanged, the ID token checked, and
  the access token accepted by the API's own authenticator (a token the API would refuse,
  for another audience say, fails the sign-in with the API's reason), then a session opens
  (`service.accounts.console_sessions`) and the browser goes on to PAGE;
- `GET /console/session` says whether sign-in by OpenID is offered and who is signed in;
- `POST /console/sign-out` ends the session on every replica and answers where the browser
  goes next (the provider's own sign-out page when it has one).
A failed sign-in goes back to the sign-in page with the reason (`?failed=`), shown as text.
Not in the OpenAPI document: these are the console's, as its pages are.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, RedirectResponse
from starlette.concurrency import run_in_threadpool

from iri_gateway.api.plumbing.problems import ApiProblem
from iri_gateway.api.sign_in.cookies import (
    CookieNames,
    cookie_names,
    require_csrf,
    session_cookie,
)
from iri_gateway.service.accounts.auth import AuthenticationError, Authenticator
from iri_gateway.service.accounts.console_sessions import (
    ConsoleSessions,
    OpenedSession,
    TooManyAttemptsError,
)
from iri_gateway.service.accounts.introspection import IntrospectionUnavailableError
from iri_gateway.service.accounts.openid_sign_in import (
    ATTEMPT_SECONDS,
    OpenIdSignIn,
    ProviderUnavailableError,
    SignInError,
)
from iri_gateway.service.operations.settings import Settings

router = APIRouter(include_in_schema=False)

NEXT_PAGE = re.compile(r"/console/[a-z-]+(\?[^#\s]{0,400})?")
"""Where a sign-in may lead: a console page (never another site: no open redirect)."""
HOME = "/console/sites"
REASON_LIMIT = 400
NO_STORE = {"Cache-Control": "no-store"}


def _next_page(asked: str | None) -> str:
    if asked and NEXT_PAGE.fullmatch(asked) and not asked.startswith("/console/sign-in"):
        return asked
    return HOME


def _openid(request: Request) -> OpenIdSignIn:
    openid: OpenIdSignIn | None = request.app.state.openid
    if openid is None:
        raise ApiProblem(
            404,
            "Not Found",
            "this gateway offers no OpenID sign-in (its operator sets openid_issuer); sign "
            "in with a token instead",
        )
    return openid


def _failed(reason: str, names: CookieNames) -> RedirectResponse:
    """Back to the sign-in page, which shows `reason` (as text) and offers to try again."""
    text = " ".join(reason.split())[:REASON_LIMIT]
    answer = RedirectResponse(
        f"/console/sign-in?failed={quote(text, safe='')}", status_code=303, headers=NO_STORE
    )
    answer.headers.append("Set-Cookie", names.clear(names.attempt))
    return answer


@router.get("/console/sign-in/openid")
async def begin_sign_in(request: Request, next: str | None = None) -> RedirectResponse:
    """Send the browser to the identity provider to sign in, then back to `next`."""
    openid = _openid(request)
    sessions: ConsoleSessions = request.app.state.engine.console_sessions
    names = cookie_names(request)
    try:
        address, attempt = await run_in_threadpool(openid.begin, _next_page(next))
        binding = await run_in_threadpool(sessions.save_attempt, attempt)
    except (ProviderUnavailableError, TooManyAttemptsError) as error:
        return _failed(str(error), names)
    answer = RedirectResponse(address, status_code=303, headers=NO_STORE)
    answer.headers.append(
        "Set-Cookie", names.set(names.attempt, binding, int(ATTEMPT_SECONDS), lax=True)
    )
    return answer


@router.get("/console/sign-in/callback")
async def finish_sign_in(request: Request) -> RedirectResponse:
    """The provider's answer: a code to exchange for tokens, or its refusal."""
    openid = _openid(request)
    sessions: ConsoleSessions = request.app.state.engine.console_sessions
    authenticator: Authenticator = request.app.state.authenticator
    names = cookie_names(request)
    query = request.query_params
    if "error" in query:
        words = ": ".join(query[k] for k in ("error", "error_description") if k in query)
        return _failed(f"the identity provider did not sign you in ({words})", names)
    state, code = query.get("state"), query.get("code")
    if not state or not code:
        return _failed("the identity provider's answer lacks its code or state", names)
    attempt = await run_in_threadpool(
        sessions.take_attempt, state, request.cookies.get(names.attempt)
    )
    if attempt is None:
        return _failed(
            "this sign-in is unknown to this browser (begun elsewhere, used already, or "
            "older than 10 minutes); sign in again",
            names,
        )

    def finish() -> OpenedSession:
        signed_in = openid.finish(attempt, code, query.get("iss"))
        principal = authenticator.authenticate(signed_in.access_token)
        lifetime: float = request.app.state.settings.console_session_lifetime
        opened = sessions.open(
            principal.user,
            signed_in.access_token,
            signed_in.id_token,
            signed_in.expires if principal.expires is None else principal.expires,
            lifetime=lifetime,
        )
        return opened

    try:
        opened = await run_in_threadpool(finish)
    except AuthenticationError as error:
        return _failed(f"the gateway refused the identity provider's token: {error}", names)
    except (SignInError, ProviderUnavailableError, IntrospectionUnavailableError) as error:
        return _failed(str(error), names)
    clock = request.app.state.engine.clock
    max_age = int(opened.expires - clock())
    answer = RedirectResponse(attempt.next_page, status_code=303, headers=NO_STORE)
    answer.headers.append("Set-Cookie", names.set(names.session, opened.cookie, max_age))
    answer.headers.append(
        "Set-Cookie", names.set(names.csrf, opened.csrf, max_age, http_only=False)
    )
    answer.headers.append("Set-Cookie", names.clear(names.attempt))
    return answer


@router.get("/console/session")
async def console_session(request: Request) -> JSONResponse:
    """What the sign-in page offers (OpenID or a token) and who the session is, if any."""
    openid: OpenIdSignIn | None = request.app.state.openid
    cookie = session_cookie(request)
    session = None
    if cookie is not None:
        sessions: ConsoleSessions = request.app.state.engine.console_sessions
        session = await run_in_threadpool(sessions.find, cookie)
    return JSONResponse(
        {
            "openid": openid is not None,
            "provider": openid.issuer if openid is not None else None,
            "signed_in": session is not None,
            "user": session.user if session is not None else None,
            "expires": session.expires if session is not None else None,
        },
        headers=NO_STORE,
    )


@router.post("/console/sign-out")
async def sign_out(request: Request) -> JSONResponse:
    """End the console's session (on every replica) and say where the browser goes next."""
    openid = _openid(request)
    names = cookie_names(request)
    cookie = session_cookie(request)
    sessions: ConsoleSessions = request.app.state.engine.console_sessions
    then = "/console/sign-in?signed-out=1"
    if cookie is not None:
        session = await run_in_threadpool(sessions.find, cookie)
        if session is not None:
            require_csrf(request, session, "sign-out")
            await run_in_threadpool(sessions.close, cookie)
            settings = request.app.state.settings
            provider = await run_in_threadpool(
                openid.sign_out_address, session.id_token, f"{settings.public_url}{then}"
            )
            then = provider or then
    answer = JSONResponse({"signed_out": True, "then": then}, headers=NO_STORE)
    for name in (names.session, names.csrf):
        answer.headers.append("Set-Cookie", names.clear(name))
    return answer


def openid_of(settings: Settings) -> OpenIdSignIn | None:
    """The sign-in of `settings` (None when `openid_issuer` is unset)."""
    if settings.openid_issuer is None:
        return None
    assert settings.openid_client_id is not None  # the settings refuse it missing
    return OpenIdSignIn(
        issuer=settings.openid_issuer,
        client_id=settings.openid_client_id,
        client_secret=settings.openid_client_secret,
        redirect_uri=f"{settings.public_url}/console/sign-in/callback",
        scopes=settings.openid_scopes,
        resource=settings.openid_resource,
    )
