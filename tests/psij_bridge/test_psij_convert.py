"""PSI/J JobSpec <-> IRI JobSpec: round trips both ways, and every documented mapping and
refusal by example. Every IRI document `to_iri` makes is checked with `parse_jobspec`."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psij import JobAttributes, JobSpec, ResourceSpec, ResourceSpecV1

from iri_gateway.models.jobspec import JobAttributes as IriAttributes
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.psij_bridge.convert import (
    PSIJ_DEFAULT_DURATION,
    ConversionError,
    from_iri,
    source_command,
    to_iri,
)
from iri_gateway.runtimes import RUNTIMES

# ---- strategies -------------------------------------------------------------------------

words = st.text(min_size=1, max_size=12)
names = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=1, max_size=12)
segments = st.text(
    st.characters(min_codepoint=33, max_codepoint=0x2FF, blacklist_characters="/"),
    min_size=1,
    max_size=8,
).filter(lambda s: s not in (".", ".."))


@st.composite
def path_texts(draw: st.DrawFn) -> str:
    """A path as pathlib writes it (normalised), so it survives the trip unchanged."""
    parts = draw(st.lists(segments, min_size=1, max_size=3))
    return ("/" if draw(st.booleans()) else "") + "/".join(parts)


@st.composite
def resource_specs(draw: st.DrawFn) -> ResourceSpecV1:
    nodes, per_node = draw(st.integers(1, 64)), draw(st.integers(1, 16))
    given_counts = draw(
        st.sampled_from(
            [
                (),
                ("node_count",),
                ("process_count",),
                ("processes_per_node",),
                ("node_count", "processes_per_node"),
                ("node_count", "process_count"),
                ("process_count", "processes_per_node"),
                ("node_count", "process_count", "processes_per_node"),
            ]
        )
    )
    counts = {
        "node_count": nodes,
        "processes_per_node": per_node,
        "process_count": nodes * per_node,
    }
    optional = st.none() | st.integers(1, 2**40)
    return ResourceSpecV1(
        **{key: counts[key] for key in given_counts},
        cpu_cores_per_process=draw(st.none() | st.integers(1, 256)),
        gpu_cores_per_process=draw(st.none() | st.integers(1, 8)),
        exclusive_node_use=draw(st.booleans()),
        memory=draw(optional),
    )


plain_keys = st.from_regex(r"\A[A-Za-z][A-Za-z0-9_-]{0,10}\Z")
volume_mounts = st.lists(
    st.fixed_dictionaries(
        {
            "source": path_texts().map(lambda p: "/" + p.lstrip("/")),
            "target": path_texts().map(lambda p: "/" + p.lstrip("/")),
        },
        optional={"read_only": st.booleans()},
    ),
    max_size=2,
)
container_fields = st.fixed_dictionaries(
    {"image": words},
    optional={
        "runtime": st.sampled_from(RUNTIMES.names()),
        "gpu": st.booleans(),
        "mpi": st.booleans(),
        "network": st.sampled_from(["host", "none"]),
        "volume_mounts": volume_mounts,
        "devices": st.lists(words, max_size=2),
    },
)
roles = st.lists(
    st.fixed_dictionaries(
        {"name": st.from_regex(r"\A[a-z][a-z-]{0,6}\Z")},
        optional={"count": st.integers(1, 4), "arguments": st.lists(words, max_size=2)},
    ).map(lambda role: {"count": 1, **role}),
    min_size=1,
    max_size=3,
    unique_by=lambda r: r["name"],
)


@st.composite
def custom_attributes(draw: st.DrawFn) -> dict[str, object] | None:
    if draw(st.booleans()):
        return None
    custom: dict[str, object] = dict(draw(st.dictionaries(plain_keys, words, max_size=3)))
    if draw(st.booleans()):
        container = draw(container_fields)
        custom.update({f"iri.container.{key}": value for key, value in container.items()})
    if draw(st.booleans()):
        custom["iri.roles"] = draw(roles)
    return custom


@st.composite
def psij_specs(draw: st.DrawFn) -> JobSpec:
    maybe = st.none
    return JobSpec(
        executable=draw(words),
        arguments=draw(maybe() | st.lists(st.text(max_size=8), max_size=3)),
        directory=draw(maybe() | path_texts()),
        name=draw(maybe() | names),
        inherit_environment=draw(st.booleans()),
        environment=draw(
            maybe()
            | st.dictionaries(  # PSI/J stores int values as text
                plain_keys, st.one_of(st.text(max_size=8), st.integers()), max_size=3
            )
        ),
        stdin_path=draw(maybe() | path_texts()),
        stdout_path=draw(maybe() | path_texts()),
        stderr_path=draw(maybe() | path_texts()),
        pre_launch=draw(maybe() | path_texts()),
        post_launch=draw(maybe() | path_texts()),
        launcher=draw(maybe() | st.sampled_from(["single", "multiple", "srun", "mpirun"])),
        resources=draw(maybe() | resource_specs()),
        attributes=JobAttributes(
            duration=timedelta(seconds=draw(st.integers(1, 10**7))),
            queue_name=draw(maybe() | names),
            account=draw(maybe() | names),
            reservation_id=draw(maybe() | names),
            custom_attributes=draw(custom_attributes()),
        ),
    )


def mapped_fields(spec: JobSpec) -> dict[str, Any]:
    """Every field the conversion maps (JobSpec.__eq__ skips `memory` and the raw name)."""
    resources = spec.resources
    attributes = spec.attributes
    return {
        "name": spec._name,
        "executable": spec.executable,
        "arguments": spec.arguments,
        "directory": spec.directory,
        "inherit_environment": spec.inherit_environment,
        "environment": spec.environment,
        "stdin_path": spec.stdin_path,
        "stdout_path": spec.stdout_path,
        "stderr_path": spec.stderr_path,
        "pre_launch": spec.pre_launch,
        "post_launch": spec.post_launch,
        "launcher": spec.launcher,
        "resources": None if resources is None else vars(resources),
        "attributes": (
            attributes.duration,
            attributes.queue_name,
            attributes.account,
            attributes.reservation_id,
            attributes.custom_attributes,
        ),
    }


@st.composite
def iri_documents(draw: st.DrawFn) -> dict[str, Any]:
    """IRI documents with a PSI/J form: via a PSI/J spec, then loosened where IRI allows."""
    document = to_iri(draw(psij_specs()))
    if draw(st.booleans()):
        document.pop("inherit_environment")
    attributes = document.get("attributes", {})
    if draw(st.booleans()):
        attributes.pop("duration", None)
    if not attributes:
        document.pop("attributes", None)
    if "resources" in document and draw(st.booleans()):
        del document["resources"]["exclusive_node_use"]  # absent: IRI's default, exclusive
    return document


def with_psij_defaults(document: dict[str, Any]) -> dict[str, Any]:
    """What an IRI document means after PSI/J: its duration defaults to 10 minutes."""
    model = parse_jobspec(document)
    attributes = model.attributes or IriAttributes()
    if attributes.duration is None:
        attributes = attributes.model_copy(update={"duration": PSIJ_DEFAULT_DURATION})
    dumped: dict[str, Any] = model.model_copy(update={"attributes": attributes}).model_dump(
        mode="json"
    )
    return dumped


# ---- round trips --------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(psij_specs())
def test_psij_to_iri_to_psij_keeps_every_mapped_field(spec: JobSpec) -> None:
    document = to_iri(spec)
    parse_jobspec(document)  # the gateway's own validation accepts it
    back = from_iri(document)
    assert mapped_fields(back) == mapped_fields(spec)
    assert back == spec


@settings(max_examples=300, deadline=None)
@given(iri_documents())
def test_iri_to_psij_to_iri_keeps_the_document(document: dict[str, Any]) -> None:
    again = to_iri(from_iri(document))
    parse_jobspec(again)
    assert parse_jobspec(again).model_dump(mode="json") == with_psij_defaults(document)


# ---- the mapping, field by field ----------------------------------------------------------


def test_plain_fields_map_one_to_one() -> None:
    spec = JobSpec(
        "/bin/sh",
        ["-c", "echo hi"],
        directory="/scratch/run",
        name="demo",
        inherit_environment=False,
        environment={"A": "1", "B": 2},
        stdin_path="in.txt",
        stdout_path="/o/out",
        stderr_path="err",
        launcher="srun",
    )
    assert to_iri(spec) == {
        "name": "demo",
        "executable": "/bin/sh",
        "arguments": ["-c", "echo hi"],
        "directory": "/scratch/run",
        "inherit_environment": False,
        "environment": {"A": "1", "B": "2"},
        "stdin_path": "in.txt",
        "stdout_path": "/o/out",
        "stderr_path": "err",
        "launcher": "srun",
        "attributes": {"duration": 600},
    }


def test_an_unset_name_is_not_sent_although_psij_reports_the_executable() -> None:
    spec = JobSpec("/bin/date")
    assert spec.name == "/bin/date"
    assert "name" not in to_iri(spec)


def test_pre_and_post_launch_scripts_become_quoted_source_commands() -> None:
    spec = JobSpec("/bin/true", pre_launch="/opt/a b/setup.sh", post_launch="env.sh")
    document = to_iri(spec)
    assert document["pre_launch"] == "source '/opt/a b/setup.sh'"
    assert document["post_launch"] == "source ./env.sh"  # never a $PATH search
    assert source_command(Path("-x.sh")) == "source ./-x.sh"  # never read as an option
    back = from_iri(document)
    assert (back.pre_launch, back.post_launch) == (Path("/opt/a b/setup.sh"), Path("env.sh"))


@pytest.mark.parametrize(
    "command",
    [
        "echo hi",
        "source env.sh",
        "source /a; rm -rf /x",
        "source /a//b",
        ". /opt/setup.sh",
        "source '/a",
    ],
)
def test_other_launch_commands_have_no_psij_form(command: str) -> None:
    with pytest.raises(ConversionError, match=r"^post_launch: PSI/J takes the path"):
        from_iri({"executable": "/bin/true", "post_launch": command})


def test_resources_map_with_exclusive_use_always_said() -> None:
    spec = JobSpec(
        "/bin/true",
        resources=ResourceSpecV1(
            node_count=2,
            processes_per_node=4,
            cpu_cores_per_process=8,
            gpu_cores_per_process=1,
            memory=2**30,
        ),
    )
    assert to_iri(spec)["resources"] == {
        "exclusive_node_use": False,
        "node_count": 2,
        "processes_per_node": 4,
        "cpu_cores_per_process": 8,
        "gpu_cores_per_process": 1,
        "memory": 2**30,
    }
    default = from_iri({"executable": "/bin/true", "resources": {"node_count": 1}}).resources
    assert isinstance(default, ResourceSpecV1) and default.exclusive_node_use is True


def test_inconsistent_iri_counts_are_refused_on_resources() -> None:
    with pytest.raises(ConversionError, match=r"^resources: .*process_count"):
        from_iri({"executable": "x", "resources": {"node_count": 2, "process_count": 3}})


def test_duration_rounds_a_partial_second_up() -> None:
    spec = JobSpec("x", attributes=JobAttributes(duration=timedelta(seconds=90, microseconds=1)))
    assert to_iri(spec)["attributes"]["duration"] == 91
    assert from_iri({"executable": "x", "attributes": {"duration": 91}}).attributes.duration == (
        timedelta(seconds=91)
    )


def test_psij_default_duration_is_sent_and_a_missing_one_comes_back_as_it() -> None:
    assert PSIJ_DEFAULT_DURATION == 600
    assert to_iri(from_iri({"executable": "x"}))["attributes"] == {"duration": 600}


@pytest.mark.parametrize("duration", [timedelta(0), timedelta(seconds=-5)])
def test_a_duration_that_is_not_positive_is_refused(duration: timedelta) -> None:
    with pytest.raises(ConversionError, match=r"^attributes\.duration: must be positive"):
        to_iri(JobSpec("x", attributes=JobAttributes(duration=duration)))


def test_queue_account_reservation_map_and_project_name_is_the_account() -> None:
    attributes = JobAttributes(queue_name="debug", reservation_id="r1", project_name="m123")
    document = to_iri(JobSpec("x", attributes=attributes))
    assert document["attributes"] == {
        "duration": 600,
        "queue_name": "debug",
        "account": "m123",
        "reservation_id": "r1",
    }
    assert from_iri(document).attributes.project_name == "m123"


def test_container_custom_attributes_become_the_container() -> None:
    attributes = JobAttributes(
        custom_attributes={
            "iri.container.image": "docker.io/library/alpine:3",
            "iri.container.runtime": "none",
            "iri.container.volume_mounts": [{"source": "/data", "target": "/in"}],
            "constraint": "gpu",
            "reservation-hours": 4,
        }
    )
    document = to_iri(JobSpec("/bin/true", attributes=attributes))
    assert document["container"] == {
        "image": "docker.io/library/alpine:3",
        "runtime": "none",
        "volume_mounts": [{"source": "/data", "target": "/in"}],
    }
    assert document["attributes"]["custom_attributes"] == {
        "constraint": "gpu",
        "reservation-hours": "4",
    }


def test_roles_travel_as_the_iri_roles_custom_attribute() -> None:
    role = [{"name": "worker", "count": 3}]
    document = {"executable": "/bin/true", "container": {"image": "img"}, "roles": role}
    spec = from_iri(document)
    assert spec.attributes.custom_attributes == {"iri.container.image": "img", "iri.roles": role}
    assert to_iri(spec)["roles"] == role


def test_an_unknown_iri_key_is_refused_naming_it() -> None:
    attributes = JobAttributes(custom_attributes={"iri.contaner.image": "img"})
    with pytest.raises(ConversionError, match=r"custom_attributes\['iri\.contaner\.image'\]"):
        to_iri(JobSpec("x", attributes=attributes))


def test_a_bad_container_value_is_named_with_its_custom_attribute() -> None:
    attributes = JobAttributes(
        custom_attributes={"iri.container.image": "img", "iri.container.gpu": "yes"}
    )
    with pytest.raises(ConversionError) as caught:
        to_iri(JobSpec("x", attributes=attributes))
    assert caught.value.problems[0][0] == "container.gpu (custom attribute 'iri.container.gpu')"


def test_what_the_gateway_schema_refuses_is_refused_naming_the_field() -> None:
    with pytest.raises(ConversionError) as caught:
        to_iri(JobSpec("", resources=ResourceSpecV1(memory=0)))
    assert [field for field, _ in caught.value.problems] == ["executable", "resources.memory"]


def test_a_resource_spec_other_than_v1_is_refused() -> None:
    class V2(ResourceSpec):
        @property
        def version(self) -> int:
            return 2

    with pytest.raises(ConversionError, match=r"^resources: only ResourceSpecV1"):
        to_iri(JobSpec("x", resources=V2()))


def test_iri_custom_keys_starting_with_iri_are_refused() -> None:
    document = {"executable": "x", "attributes": {"custom_attributes": {"iri.roles": "x"}}}
    with pytest.raises(ConversionError, match=r"custom_attributes\['iri\.roles'\]"):
        from_iri(document)


def test_unofficial_resource_fields_are_refused_and_metadata_dropped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with pytest.raises(ConversionError, match=r"^resources\.colour: not an official"):
        from_iri({"executable": "x", "resources": {"colour": "red"}})
    with caplog.at_level(logging.WARNING, logger="iri_gateway.psij_bridge.convert"):
        spec = from_iri({"executable": "x", "attributes": {"attributes": {"k": "v"}}})
    assert "attributes.attributes (metadata) has no PSI/J equivalent" in caplog.text
    assert to_iri(spec)["attributes"] == {"duration": 600}


def test_an_invalid_iri_document_is_refused_with_its_fields() -> None:
    with pytest.raises(ConversionError) as caught:
        from_iri({"executable": "x", "resources": {"node_count": "2"}, "bogus": 1})
    assert sorted(field for field, _ in caught.value.problems) == ["bogus", "resources.node_count"]


def test_paths_come_back_normalised() -> None:
    spec = from_iri({"executable": "x", "directory": "/a//b/", "stdout_path": "./o"})
    assert to_iri(spec)["directory"] == "/a/b" and to_iri(spec)["stdout_path"] == "o"
