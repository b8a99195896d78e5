"""The gateway's OpenAPI document, as shipped in `openapi/openapi.json` (a test checks drift)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from iri_gateway.api.app import create_app
from iri_gateway.service.operations.settings import Settings


def openapi_document() -> str:
    """The OpenAPI JSON of an app on default settings (built in a throwaway data folder)."""
    with tempfile.TemporaryDirectory(prefix="iri-openapi-") as folder:
        app = create_app(Settings(data_dir=Path(folder)), run_poller=False)
        document = app.openapi()
        app.state.engine.close()
    return json.dumps(document, indent=2, sort_keys=True) + "\n"
