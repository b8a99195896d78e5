"""One call to the identity provider, its answer read with a bound: what the introspection
check (`introspection`) and the console's sign-in (`openid_sign_in`) share. Each says in its
own words what a failure means for its caller (a token refused until the provider answers;
a sign-in to try again)."""

from __future__ import annotations

import json
from typing import Any

import httpx


class AnswerTooLargeError(Exception):
    """The provider's answer grew past the bound given."""


def bounded_answer(
    method: str,
    url: str,
    *,
    timeout: float,
    limit: int,
    form: dict[str, str] | None = None,
    auth: tuple[str, str] | None = None,
) -> tuple[int, bytes]:
    """The status and body of `method url` (a form, HTTP Basic `auth`, no redirects
    followed); AnswerTooLargeError past `limit` bytes, httpx.HTTPError when the provider
    cannot be reached or does not answer within `timeout`."""
    with (
        httpx.Client(timeout=timeout, follow_redirects=False) as client,
        client.stream(
            method, url, data=form, auth=auth, headers={"Accept": "application/json"}
        ) as answer,
    ):
        body = b""
        for part in answer.iter_bytes():
            body += part
            if len(body) > limit:
                raise AnswerTooLargeError(f"more than {limit} bytes")
        return answer.status_code, body


def json_object(body: bytes) -> dict[str, Any] | None:
    """`body` as a JSON object; None when it is not one."""
    try:
        document = json.loads(body)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None
