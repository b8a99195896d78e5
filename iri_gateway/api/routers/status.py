"""The IRI `status` operations (being written; see issue #4)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/api/v2", tags=["status"])
