"""A job without roles declares service ports (`ports`, issue 29): checked when read, given
to the job as IRI_PORT_<NAME>, refused beside roles."""

from __future__ import annotations

from typing import Any

import pytest

from iri_gateway.errors import InvalidJobSpecError
from iri_gateway.models.job_templates import TaskTemplate
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.planning.job_templates import expand
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.profiles.loading import ProfileRegistry
from tests.conftest import plan_for


def test_a_job_is_told_its_ports(registry: ProfileRegistry) -> None:
    document = {"executable": "/bin/true", "ports": {"lab": 8888, "metrics": 9100}}
    plan = plan_for(registry, "local", document)
    assert "export IRI_PORT_LAB=8888" in plan.script
    assert "export IRI_PORT_METRICS=9100" in plan.script


def test_a_job_without_ports_is_told_none(registry: ProfileRegistry) -> None:
    plan = plan_for(registry, "local", {"executable": "/bin/true"})
    assert "IRI_PORT_" not in plan.script


@pytest.mark.parametrize(
    ("ports", "field", "message"),
    [
        ({"Lab": 8888}, "ports", "lower case"),
        ({"lab": 0}, "ports.lab", "greater than or equal to 1"),
        ({"lab": 65536}, "ports.lab", "less than or equal to 65535"),
        ({"lab": "8888"}, "ports.lab", "integer"),
        ({f"p{n}": 1000 + n for n in range(17)}, "ports", "at most 16"),
    ],
)
def test_bad_ports_are_refused_naming_the_field(
    ports: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(InvalidJobSpecError) as caught:
        parse_jobspec({"executable": "/x", "ports": ports})
    assert any(p.field.startswith(field) and message in p.reason for p in caught.value.problems), (
        caught.value.problems
    )


def test_ports_beside_roles_are_refused_pointing_at_the_roles() -> None:
    with pytest.raises(InvalidJobSpecError) as caught:
        parse_jobspec(
            {"executable": "/x", "ports": {"http": 80}, "roles": [{"name": "w", "count": 1}]}
        )
    assert any("declares its service ports per role" in p.reason for p in caught.value.problems)


def test_a_task_template_brings_its_ports_and_the_job_wins() -> None:
    template = TaskTemplate.model_validate(
        {"kind": "task", "executable": "/bin/lab", "ports": {"lab": 8888, "ui": 4040}}
    )
    spec = JobSpec.model_validate({"template": "notebook", "ports": {"ui": 5050}})
    expanded = expand(spec, {"notebook": template})
    assert expanded.spec.ports == {"lab": 8888, "ui": 5050}
