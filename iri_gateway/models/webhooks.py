"""Webhooks as users write them: a job's `notify` and a standing subscription.

Only what can be judged from the text is checked here (scheme, length, a host, no
credentials, the events): whether the operator lets the gateway call that host (https only
unless allowed, no private or loopback address) depends on settings and on DNS, and is
decided by the service (`service/webhooks/destinations.py`) when the job is launched or the
subscription made, and again at every delivery.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from iri_gateway.models.job import JobState
from iri_gateway.models.limits import unicode_text

MAX_URL_LENGTH = 2048
"""Longest webhook URL accepted, in characters."""

FINAL_STATES = [state.value for state in JobState if state.final]
"""The states a `notify` without `events` is told about."""

STATE_NAMES = [state.value for state in JobState]


def _url_text(url: str) -> str:
    """The URL's form, before any policy: ASCII (the schema's `uri` format), http or
    https, a host, no credentials, no fragment, no spaces or control characters."""
    from urllib.parse import urlsplit

    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F or ch == "\\" for ch in url):
        raise ValueError("spaces, control characters and backslashes are not allowed in a URL")
    if not url.isascii():
        raise ValueError(
            "a URL is ASCII (RFC 3986): write an international host name in its xn-- form "
            "and other characters percent-encoded"
        )
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http"):
        raise ValueError(f"scheme {parts.scheme or '(none)'!r}: a webhook URL is https://")
    if "@" in parts.netloc:
        raise ValueError(
            "credentials in the URL (user@host) are not allowed: deliveries are "
            "authenticated by their signature"
        )
    if not parts.hostname:
        raise ValueError("the URL names no host")
    if parts.fragment or url.endswith("#"):
        raise ValueError("a fragment (#...) is never sent; leave it out")
    try:
        parts.port  # noqa: B018 - raises on a port out of range or not a number
    except ValueError as error:
        raise ValueError(f"port: {error}") from None
    return url


WebhookUrl = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_URL_LENGTH,
        examples=["https://example.org/hooks/iri"],
        json_schema_extra={"format": "uri", "pattern": "^https?://"},
    ),
    BeforeValidator(unicode_text),
    AfterValidator(_url_text),
]
"""An http(s) URL the gateway may POST to, as written; its host is judged by the service."""


def _known_states(states: list[str]) -> list[str]:
    unknown = [state for state in states if state not in STATE_NAMES]
    if unknown:
        raise ValueError(
            f"not a job state: {', '.join(repr(s) for s in unknown)}; the job states are "
            f"{', '.join(STATE_NAMES)}"
        )
    twice = sorted({state for state in states if states.count(state) > 1})
    if twice:
        raise ValueError(f"each state once: {', '.join(repr(s) for s in twice)} given twice")
    return states


EventStates = Annotated[
    list[str],
    Field(
        min_length=1,
        max_length=len(STATE_NAMES),
        json_schema_extra={"items": {"enum": STATE_NAMES}, "uniqueItems": True},
    ),
    AfterValidator(_known_states),
]
"""A non-empty set of IRI job states (as a list, in the order given, each once)."""


def refuse_unknown(data: Any, model: type[BaseModel]) -> Any:
    """A field the model does not define is refused with the closest known name, as the
    JobSpec's other extensions are (`container.*`): never ignored."""
    if isinstance(data, dict):
        known = sorted(model.model_fields)
        for key in data:
            if key not in model.model_fields:
                close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.5)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise ValueError(
                    f"{key!r} is not a field of {model.__name__}; {hint}known: {', '.join(known)}"
                )
    return data


class Notify(BaseModel):
    """Extension (JobSpec `notify`): a callback the gateway POSTs the job's events to,
    signed with the user's notify secret (`POST /api/v2/compute/notify-secret`)."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    url: WebhookUrl = Field(
        description="Where to POST the events: https (http only for hosts the operator "
        f"lists); at most {MAX_URL_LENGTH} characters; no credentials; a public address "
        "unless the operator allows the network"
    )
    events: EventStates = Field(
        default_factory=lambda: list(FINAL_STATES),
        description="The job states to be told about; default: the final ones "
        f"({', '.join(FINAL_STATES)})",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_fields(cls, data: Any) -> Any:
        return refuse_unknown(data, cls)


class SubscriptionRequest(BaseModel):
    """A standing subscription as a user asks for it (`POST /api/v2/compute/subscriptions`)."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    url: WebhookUrl = Field(
        description="Where to POST the events (see `Notify.url` for what is accepted)"
    )
    events: EventStates = Field(
        default_factory=lambda: list(FINAL_STATES),
        description="The job states to be told about, for every job of yours; default: the "
        f"final ones ({', '.join(FINAL_STATES)})",
    )
    resource_id: Annotated[str, Field(min_length=1, max_length=63)] | None = Field(
        default=None,
        description="Only the jobs of this resource; default: every resource",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_fields(cls, data: Any) -> Any:
        return refuse_unknown(data, cls)
