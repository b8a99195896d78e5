"""The SDK does not pull in the server: importing `iri_gateway.client` in a fresh interpreter
loads neither the web framework, the database layer, the template engine, nor the gateway's
negotiation, service or API code. A client program stays small and starts fast."""

from __future__ import annotations

import json
import subprocess
import sys

SERVER_SIDE = (
    "fastapi",
    "sqlalchemy",
    "jinja2",
    "iri_gateway.planning",
    "iri_gateway.service",
    "iri_gateway.api",
)


def test_importing_the_sdk_loads_nothing_of_the_server() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys\n"
            "from iri_gateway.client import AsyncGatewayClient, GatewayClient, InvalidRequest\n"
            "print(json.dumps(sorted(sys.modules)))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    modules = json.loads(result.stdout)
    assert "iri_gateway.client" in modules
    loaded = [
        name
        for name in modules
        if any(name == root or name.startswith(root + ".") for root in SERVER_SIDE)
    ]
    assert loaded == []
