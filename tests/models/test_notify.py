"""The JobSpec's `notify` extension and a subscription's body: what their text may be (the
destination's policy is the service's, tests/service/webhooks)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from iri_gateway.errors import InvalidJobSpecError
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.models.webhooks import MAX_URL_LENGTH, Notify, SubscriptionRequest
from iri_gateway.planning.jobspec_io import parse_jobspec


def test_notify_defaults_to_the_final_states() -> None:
    spec = JobSpec.model_validate(
        {"executable": "/bin/true", "notify": {"url": "https://example.org/hook"}}
    )
    assert spec.notify is not None
    assert spec.notify.events == ["completed", "failed", "canceled"]


def test_a_job_without_notify_is_unchanged() -> None:
    document = {"executable": "/bin/true"}
    assert JobSpec.model_validate(document).model_dump(exclude_unset=True) == document


@pytest.mark.parametrize(
    ("notify", "reason"),
    [
        ({"url": "https://example.org/h", "event": ["completed"]}, "did you mean 'events'?"),
        ({"uri": "https://example.org/h"}, "did you mean 'url'?"),
        ({"url": "https://example.org/h", "events": []}, "at least 1 item"),
        ({"url": "https://example.org/h", "events": ["done"]}, "not a job state: 'done'"),
        ({"url": "ftp://example.org/h"}, "a webhook URL is https://"),
        ({"url": "https://a@example.org/h"}, "credentials in the URL"),
        ({"url": "https://example.org/h#x"}, "fragment"),
        ({"url": "https://exa mple.org/h"}, "spaces, control characters"),
        ({"url": "https://example.org/h", "events": ["new", "new"]}, "given twice"),
        ({"url": "https://\u00cf.example/h"}, "xn-- form"),
        ({"url": "https://example.org:99999/h"}, "port"),
        ({"url": "https://example.org/" + "a" * MAX_URL_LENGTH}, f"at most {MAX_URL_LENGTH}"),
        ({"url": "https:///h"}, "names no host"),
    ],
)
def test_bad_notify_is_refused_naming_the_field(notify: dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidJobSpecError) as refused:
        parse_jobspec({"executable": "/bin/true", "notify": notify})
    found = [(p.field, p.reason) for p in refused.value.problems]
    assert any(field.startswith("notify") and reason in why for field, why in found), found


def test_events_are_kept_in_the_order_given() -> None:
    notify = Notify.model_validate({"url": "https://example.org/h", "events": ["active", "queued"]})
    assert notify.events == ["active", "queued"]


def test_a_subscription_refuses_unknown_fields_with_the_closest() -> None:
    with pytest.raises(ValidationError, match="did you mean 'resource_id'"):
        SubscriptionRequest.model_validate({"url": "https://example.org/h", "resource": "x"})
