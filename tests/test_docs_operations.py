"""docs/iri-api.md, the per-operation page, held to the OpenAPI document the gateway serves.

The page has one section per operation (`### \\`operationId\\``, then its method and path),
official operations under the official tag's heading, our own under `## Extensions`. This
fails when an operation we serve, or any of the 47 official ones, has no section; when a
section names an operation that is not served (or not where the page says); and when a
section's **Statuses** line does not list exactly the statuses our OpenAPI documents for the
operation (500, said once for all at the top of the page, aside).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from iri_gateway.api.export import openapi_document
from tests.api.conftest import OFFICIAL_SPEC
from tests.api.test_operation_compliance import operation_ids

PAGE = Path(__file__).resolve().parent.parent / "docs" / "iri-api.md"
EXTENSIONS = "Extensions"
SAID_ONCE = {"500"}
"""Statuses the page states once for every operation instead of in each section."""


@dataclass(frozen=True)
class Section:
    """One operation's section of the page."""

    operation_id: str
    group: str
    """The `## ` heading it is under (a tag, or Extensions)."""
    method: str
    path: str
    statuses: frozenset[str]


def sections(text: str) -> list[Section]:
    """Every `### \\`operationId\\`` section of the page, in order."""
    found: list[Section] = []
    group = ""
    for block in re.split(r"^(?=#{2,3} )", text, flags=re.MULTILINE):
        heading = re.match(r"## (.+)", block)
        if heading:
            group = heading.group(1).strip()
            continue
        operation = re.match(r"### `([A-Za-z]+)`\n", block)
        if not operation:
            continue
        where = re.search(r"^`(GET|PUT|POST|DELETE|PATCH) (/\S*)`$", block, flags=re.MULTILINE)
        said = re.search(
            r"^- \*\*Statuses\*\*:(.*?)(?=^- \*\*|\Z)", block, flags=re.MULTILINE | re.DOTALL
        )
        assert where, f"{operation.group(1)}: no `METHOD /path` line in its section"
        assert said, f"{operation.group(1)}: no **Statuses** line in its section"
        found.append(
            Section(
                operation.group(1),
                group,
                where.group(1),
                where.group(2),
                frozenset(re.findall(r"`(\d{3})`", said.group(1))),
            )
        )
    return found


DOCUMENT = json.loads(openapi_document())
OURS = operation_ids(DOCUMENT)
OFFICIAL = operation_ids(yaml.safe_load(OFFICIAL_SPEC.read_text(encoding="utf-8")))
PAGE_SECTIONS = sections(PAGE.read_text(encoding="utf-8"))
BY_ID = {section.operation_id: section for section in PAGE_SECTIONS}


def _documented_statuses(operation_id: str) -> set[str]:
    method, path, _ = OURS[operation_id]
    return set(DOCUMENT["paths"][path][method.lower()]["responses"]) - SAID_ONCE


def test_each_operation_has_one_section() -> None:
    named = [section.operation_id for section in PAGE_SECTIONS]
    assert sorted(named) == sorted(set(named)), "an operation has two sections"


def test_every_official_operation_has_its_section_under_its_tag() -> None:
    assert len(OFFICIAL) == 47
    missing = sorted(set(OFFICIAL) - set(BY_ID))
    assert not missing, f"official operations without a section in {PAGE.name}: {missing}"
    misplaced = {
        op: BY_ID[op].group for op, (_, _, tags) in OFFICIAL.items() if BY_ID[op].group != tags[0]
    }
    assert not misplaced, f"official operations not under their official tag: {misplaced}"


def test_every_served_operation_has_its_section() -> None:
    missing = sorted(set(OURS) - set(BY_ID))
    assert not missing, f"served operations without a section in {PAGE.name}: {missing}"


def test_the_extensions_section_holds_exactly_our_own_operations() -> None:
    listed = {s.operation_id for s in PAGE_SECTIONS if s.group == EXTENSIONS}
    assert listed == set(OURS) - set(OFFICIAL)


def test_no_section_names_an_operation_not_served() -> None:
    unknown = sorted(set(BY_ID) - set(OURS))
    assert not unknown, f"{PAGE.name} names operations the gateway does not serve: {unknown}"


@pytest.mark.parametrize("operation_id", sorted(OURS))
def test_the_section_gives_the_served_method_path_and_statuses(operation_id: str) -> None:
    section = BY_ID.get(operation_id)
    assert section is not None, f"{operation_id}: no section"
    method, path, _ = OURS[operation_id]
    assert (section.method, section.path) == (method, path)
    assert set(section.statuses) == _documented_statuses(operation_id), (
        f"{operation_id}: the page lists {sorted(section.statuses)}, our OpenAPI documents "
        f"{sorted(_documented_statuses(operation_id))} (besides 500)"
    )


def test_the_checks_catch_a_page_that_lost_a_section_or_names_a_stranger() -> None:
    """The parser, on a page changed the two ways the tests above must notice."""
    text = PAGE.read_text(encoding="utf-8")
    without = sections(
        re.sub(r"^### `getSite`\n.*?(?=^### )", "", text, flags=re.MULTILINE | re.DOTALL)
    )
    assert "getSite" not in {s.operation_id for s in without}
    stranger = sections(
        text + "\n### `getWeather`\n\n`GET /api/v2/weather`\n\n- **Statuses**: `200`.\n"
    )
    assert "getWeather" in {s.operation_id for s in stranger} - set(OURS)
