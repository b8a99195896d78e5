"""A limit on the size of request bodies (`Settings.max_request_bytes`), as ASGI middleware.

Without it, a 10 MB JobSpec was read, planned, stored and sent to the scheduler, and every
such request grew the database and the server's memory. The body is counted as it arrives:
a `Content-Length` over the limit is refused before any byte is read, and a body without
one (chunked) when its running total passes the limit, so no oversized body is ever held
whole. The refusal is `BodyTooLarge`, which `problems` answers with a 413 problem naming the
limit.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyTooLarge(HTTPException):
    """The request body is larger than the server accepts.

    An HTTPException, so that FastAPI, which turns other errors met while reading a body
    into a 400, lets it through to the app's handlers unchanged.
    """

    def __init__(self, limit: int, declared: int | None) -> None:
        self.limit, self.declared = limit, declared
        size = f" ({declared} bytes)" if declared is not None else ""
        super().__init__(
            413,
            f"the request body{size} is larger than the {limit} bytes this "
            "server accepts (its setting max_request_bytes)",
        )


class BodyLimit:
    """Refuse request bodies over `limit` bytes: raises BodyTooLarge from `receive`.

    Paths starting with one of `exempt` are passed through untouched: routes that stream
    their bodies and enforce their own limit (uploads, `Settings.max_upload_bytes`).
    """

    def __init__(self, app: ASGIApp, limit: int, exempt: tuple[str, ...] = ()) -> None:
        self.app = app
        self.limit = limit
        self.exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or str(scope["path"]).startswith(self.exempt):
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        limit = self.limit
        received = 0

        async def limited() -> Message:
            nonlocal received
            if declared is not None and declared > limit:
                raise BodyTooLarge(limit, declared)
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit, declared)
            return message

        await self.app(scope, limited, send)


def _content_length(scope: Scope) -> int | None:
    """The declared body size; None when absent or not a number (then counting decides)."""
    value = Headers(scope=scope).get("content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
