"""The API's only door into the gateway is the service layer's methods.

Routers and the other `iri_gateway/api` modules call the engine (`Engine.jobs`, `Engine.resource`,
`Engine.files`, ...), never its store, backends or profile registry directly, so what a
request may do is decided in one place, below HTTP.
"""

from __future__ import annotations

import ast
from pathlib import Path

import iri_gateway.api

API = Path(iri_gateway.api.__file__).parent
INNER_PARTS = {"store", "backends", "registry"}


def test_the_api_reaches_the_service_only_through_its_methods() -> None:
    reaching_in = []
    for module in sorted(API.rglob("*.py")):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in INNER_PARTS:
                where = f"{module.relative_to(API.parent)}:{node.lineno}"
                reaching_in.append(f"{where}: {ast.unparse(node)}")
    assert reaching_in == []
