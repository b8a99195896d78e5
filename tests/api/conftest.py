"""Shared fixtures of the API tests: the app, an ASGI client, a token, the official schemas."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fastapi import FastAPI
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from iri_gateway.api.app import create_app
from iri_gateway.service.operations.settings import Settings

OFFICIAL_SPEC = (
    Path(__file__).parent.parent.parent
    / "openapi"
    / "official"
    / "iri-facility-api-v2.openapi.yaml"
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def app(tmp_path: Path) -> Iterator[FastAPI]:
    """The embedded default: the built-in `local` profile, no poller. Its engine is closed
    after the test: FastAPI's included routers (module-level) keep every application alive,
    and with it its store's open database files."""
    built = create_app(Settings(data_dir=tmp_path), run_poller=False)
    yield built
    built.state.engine.close()


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


@pytest.fixture
def token(app: FastAPI) -> str:
    """A bearer token of user `alice`, member of project `proj1`."""
    issued: str = app.state.tokens.issue("alice", ["proj1"])
    return issued


@pytest.fixture
def admin_token(app: FastAPI) -> str:
    """A facility admin's bearer token (user `root`, no project): may check profiles."""
    issued: str = app.state.tokens.issue("root", admin=True)
    return issued


@pytest.fixture(scope="session")
def official_spec() -> dict[str, Any]:
    """The official IRI Facility API v2 OpenAPI document."""
    spec: dict[str, Any] = yaml.safe_load(OFFICIAL_SPEC.read_text(encoding="utf-8"))
    return spec


class OfficialSchemas:
    """Validators of the official component schemas (Draft 2020-12, formats checked)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.components = spec["components"]
        self._validators: dict[str, Draft202012Validator] = {}

    def validator(self, name: str, *, array: bool = False) -> Draft202012Validator:
        key = f"{name}[]" if array else name
        if key not in self._validators:
            ref = {"$ref": f"#/components/schemas/{name}"}
            root: dict[str, Any] = {"type": "array", "items": ref} if array else dict(ref)
            root["components"] = self.components
            Draft202012Validator.check_schema(root)
            self._validators[key] = Draft202012Validator(
                root, format_checker=Draft202012Validator.FORMAT_CHECKER
            )
        return self._validators[key]

    def check(self, name: str, body: Any, *, array: bool = False) -> None:
        """Fail with the most relevant error unless `body` is a valid official `name`."""
        error = best_match(self.validator(name, array=array).iter_errors(body))
        assert error is None, (
            f"not a valid official {name}{'[]' if array else ''} at "
            f"{'/'.join(map(str, error.absolute_path)) or '(root)'}: {error.message}"
        )


@pytest.fixture(scope="session")
def official(official_spec: dict[str, Any]) -> OfficialSchemas:
    return OfficialSchemas(official_spec)
