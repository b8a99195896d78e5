"""Typed FastAPI dependencies: the engine, the caller, the settings."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from iri_gateway.auth import Authenticator, Principal
from iri_gateway.engine import Engine
from iri_gateway.settings import Settings

_bearer = HTTPBearer(auto_error=False)


# Dependencies are `async def` on purpose: they only read app state, and a sync dependency
# would be sent to the thread pool on every request.
async def get_engine(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


async def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    authenticator: Authenticator = request.app.state.authenticator
    return authenticator.authenticate(credentials.credentials if credentials else None)


EngineDep = Annotated[Engine, Depends(get_engine)]
SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
