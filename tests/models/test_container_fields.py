"""Container fields: the IRI container discussion's names are aliases, and no field is ignored.

`container_runtime` (for `container`) and `network_mode` (for `container.network`) mean the
same as the gateway's names; both at once is an error. Any other field the gateway does not
know is refused at negotiation, naming it and the closest known field: the official
`Container` allows extra fields, so validation accepts them, but ignoring one would run the
job other than asked.
"""

from __future__ import annotations

from typing import Any

import pytest

from iri_gateway.errors import InvalidJobSpecError
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.profiles.loading import ProfileRegistry
from tests.conftest import plan_for, problems_for

IMAGE = "docker.io/library/ubuntu:22.04"


def job(**overrides: Any) -> dict[str, Any]:
    document: dict[str, Any] = {"executable": "/bin/app", "container": {"image": IMAGE}}
    document.update(overrides)
    return document


def test_network_mode_is_network(registry: ProfileRegistry) -> None:
    plan = plan_for(
        registry, "testsite-gpu", job(container={"image": IMAGE, "network_mode": "none"})
    )
    assert "--network none" in plan.script
    assert plan.warnings == []


def test_container_runtime_is_container(registry: ProfileRegistry) -> None:
    spec = parse_jobspec(
        {"executable": "/bin/app", "container_runtime": {"image": IMAGE, "network_mode": "none"}}
    )
    assert spec.container is not None and spec.container.network == "none"
    plan = plan_for(
        registry,
        "testsite-gpu",
        {
            "executable": "/bin/app",
            "container_runtime": {"image": IMAGE},
        },
    )
    assert plan.runtime == "podman" and plan.image == IMAGE


@pytest.mark.parametrize(
    ("document", "names"),
    [
        (
            job(container={"image": IMAGE, "network": "host", "network_mode": "none"}),
            ("'network'", "'network_mode'"),
        ),
        (
            {
                "executable": "/bin/app",
                "container": {"image": IMAGE},
                "container_runtime": {"image": IMAGE},
            },
            ("'container'", "'container_runtime'"),
        ),
        (
            job(
                roles=[
                    {
                        "name": "worker",
                        "count": 1,
                        "container": {"network": "none", "network_mode": "none"},
                    }
                ]
            ),
            ("'network'", "'network_mode'"),
        ),
    ],
)
def test_a_field_and_its_alias_at_once_is_refused(
    document: dict[str, Any], names: tuple[str, str]
) -> None:
    with pytest.raises(InvalidJobSpecError) as caught:
        parse_jobspec(document)
    (problem,) = caught.value.problems
    assert all(name in problem.reason for name in names)
    assert "alias" in problem.reason


def test_an_unknown_container_field_is_refused_with_the_closest_name(
    registry: ProfileRegistry,
) -> None:
    problems = problems_for(
        registry, "testsite-gpu", job(container={"image": IMAGE, "netwrk": "none"})
    )
    (problem,) = problems
    assert problem.field == "container.netwrk"
    assert problem.reason == "not a field this gateway knows"
    assert (problem.offered or "").startswith("did you mean 'network'?")
    assert "network_mode" in (problem.offered or "")


def test_an_unknown_mount_field_is_refused(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry,
        "testsite-gpu",
        job(
            container={
                "image": IMAGE,
                "volume_mounts": [{"source": "/srv/data", "target": "/data", "readonly": False}],
            }
        ),
    )
    (problem,) = problems
    assert problem.field == "container.volume_mounts[0].readonly"
    assert (problem.offered or "").startswith("did you mean 'read_only'?")


def test_an_unknown_field_of_a_role_container_names_the_role(
    registry: ProfileRegistry,
) -> None:
    problems = problems_for(
        registry,
        "testsite-gpu",
        job(
            roles=[{"name": "worker", "count": 1, "container": {"gpus": True}}],
        ),
    )
    assert [p.field for p in problems] == ["roles[0].container.gpus"]
    assert (problems[0].offered or "").startswith("did you mean 'gpu'?")


def test_an_unknown_field_beside_flavours_is_the_jobs_not_a_flavours(
    registry: ProfileRegistry,
) -> None:
    flavours = [
        {"name": "a", "image": IMAGE, "priority": 2},
        {"name": "b", "image": IMAGE, "priority": 1},
    ]
    problems = problems_for(
        registry,
        "frontier",
        {
            "executable": "/bin/app",
            "container": {"netwrk": "none", "flavours": flavours},
        },
    )
    assert [(p.field, p.reason) for p in problems] == [
        ("container.netwrk", "not a field this gateway knows")
    ]


def test_an_official_container_with_extra_fields_still_validates() -> None:
    spec = parse_jobspec(job(container={"image": IMAGE, "colour": "red"}))
    assert spec.container is not None and spec.container.model_extra == {"colour": "red"}
