"""openapi/openapi.json is the gateway's own OpenAPI document, exactly."""

from __future__ import annotations

from iri_gateway.api.export import openapi_document
from tests.support.paths import ROOT

SHIPPED = ROOT / "openapi" / "openapi.json"


def test_shipped_openapi_matches_the_app() -> None:
    assert SHIPPED.read_text() == openapi_document(), (
        "openapi/openapi.json is stale: run `iri-gateway openapi > openapi/openapi.json`"
    )
