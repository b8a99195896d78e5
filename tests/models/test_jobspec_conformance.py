"""The JobSpec against the OFFICIAL IRI Facility API v2 schema (docs/design.md, Contract 1).

The oracle is the JSON Schema of `JobSpec` taken straight from the shipped OpenAPI document
and checked with `jsonschema` (Draft 2020-12; OpenAPI's `example` keyword is ignored). Any
document it accepts must be accepted by `parse_jobspec` and must keep every field it set;
unknown top-level keys are refused by both; type errors are refused by both with the same
JSON path; the gateway's extensions inside `container` stay valid official JobSpecs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from iri_gateway.errors import InvalidJobSpecError, json_path
from iri_gateway.models.jobspec import Container
from iri_gateway.planning.jobspec_io import load_jobspec_text, parse_jobspec
from tests.support.paths import ROOT

SPEC_FILE = ROOT / "openapi" / "official" / "iri-facility-api-v2.openapi.yaml"
SPEC: dict[str, Any] = yaml.safe_load(SPEC_FILE.read_text(encoding="utf-8"))
SCHEMAS: dict[str, Any] = SPEC["components"]["schemas"]
ROOT = {"$ref": "#/components/schemas/JobSpec", "components": SPEC["components"]}
Draft202012Validator.check_schema(ROOT)
OFFICIAL = Draft202012Validator(ROOT)


def props(name: str) -> set[str]:
    """The properties the official schema `name` defines."""
    return set(SCHEMAS[name]["properties"])


# Names the gateway gives a meaning inside `container` (its own fields, plus the documented
# `flavours` extension): a random extra property there is not "just extra" any more.
CONTAINER_RESERVED = props("Container") | set(Container.model_fields) | {"flavours"}
# `roles` is the documented top-level extension (docs/design.md); not an "unknown" key for us.
TOP_LEVEL_RESERVED = props("JobSpec") | {"roles"}

BOUNDED = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def official_errors(document: Any) -> list[str]:
    return [
        f"{json_path(error.absolute_path)}: {error.message}"
        for error in OFFICIAL.iter_errors(document)
    ]


def parse_problems(document: Any) -> list[tuple[str, str]]:
    with pytest.raises(InvalidJobSpecError) as caught:
        parse_jobspec(document)
    return [(problem.field, problem.reason) for problem in caught.value.problems]


def assert_kept(expected: Any, actual: Any, path: str = "(document)") -> None:
    """Every field of `expected` is in `actual` with the same JSON value (and JSON type)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: object became {actual!r}"
        for key, value in expected.items():
            assert key in actual, f"{path}: field {key!r} was dropped"
            assert_kept(value, actual[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list), f"{path}: array became {actual!r}"
        assert len(actual) == len(expected), f"{path}: {expected!r} became {actual!r}"
        for index, (want, got) in enumerate(zip(expected, actual, strict=True)):
            assert_kept(want, got, f"{path}[{index}]")
    else:
        assert type(actual) is type(expected) and actual == expected, (
            f"{path}: {expected!r} became {actual!r}"
        )


def round_trip(document: dict[str, Any]) -> dict[str, Any]:
    dumped: dict[str, Any] = parse_jobspec(document).model_dump(mode="json", exclude_unset=True)
    return dumped


# --------------------------------------------------------------------------- strategies

keys = st.text(max_size=10)
texts = st.text(max_size=12)
non_empty = st.text(min_size=1, max_size=12)
counts = st.integers(min_value=1, max_value=2**40)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=6,
)


def nullable(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


# The `attributes` member of every official object: an open object, or null.
object_attributes = nullable(st.dictionaries(keys, json_values, max_size=3))


@st.composite
def open_object(
    draw: st.DrawFn,
    reserved: set[str],
    optional: dict[str, st.SearchStrategy[Any]],
    required: dict[str, st.SearchStrategy[Any]] | None = None,
) -> dict[str, Any]:
    """An official object with `additionalProperties: true`: its fields plus random extras."""
    fields = draw(st.fixed_dictionaries(required or {}, optional=optional))
    extras = draw(
        st.dictionaries(keys.filter(lambda key: key not in reserved), json_values, max_size=2)
    )
    return {**extras, **fields}


volume_mounts = open_object(
    props("VolumeMount"),
    optional={"read_only": st.booleans(), "attributes": object_attributes},
    required={"source": non_empty, "target": non_empty},
)
containers = open_object(
    CONTAINER_RESERVED,
    optional={
        "volume_mounts": st.lists(volume_mounts, max_size=3),
        "attributes": object_attributes,
    },
    required={"image": non_empty},
)
resource_specs = open_object(
    props("ResourceSpec"),
    optional={
        "node_count": nullable(counts),
        "process_count": nullable(counts),
        "processes_per_node": nullable(counts),
        "cpu_cores_per_process": nullable(counts),
        "gpu_cores_per_process": nullable(counts),
        "exclusive_node_use": st.booleans(),
        "memory": nullable(counts),
        "attributes": object_attributes,
    },
)
job_attributes = open_object(
    props("JobAttributes"),
    optional={
        "duration": nullable(counts),
        "queue_name": nullable(non_empty),
        "account": nullable(non_empty),
        "reservation_id": nullable(non_empty),
        "custom_attributes": st.dictionaries(keys, texts, max_size=3),
        "attributes": object_attributes,
    },
)
JOBSPEC_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "executable": nullable(non_empty),
    "arguments": st.lists(texts, max_size=4),
    "directory": nullable(non_empty),
    "name": nullable(non_empty),
    "inherit_environment": st.booleans(),
    "environment": st.dictionaries(keys, texts, max_size=3),
    "stdin_path": nullable(non_empty),
    "stdout_path": nullable(non_empty),
    "stderr_path": nullable(non_empty),
    "resources": nullable(resource_specs),
    "attributes": nullable(job_attributes),
    "pre_launch": nullable(non_empty),
    "post_launch": nullable(non_empty),
    "launcher": nullable(non_empty),
    "container": nullable(containers),
}
jobspecs = st.fixed_dictionaries({}, optional=JOBSPEC_FIELDS)


def test_strategy_covers_every_official_field() -> None:
    assert set(JOBSPEC_FIELDS) == props("JobSpec")


# --------------------------------------------------------------------------- properties


@BOUNDED
@given(document=jobspecs)
def test_official_jobspecs_are_accepted_and_kept(document: dict[str, Any]) -> None:
    assert official_errors(document) == [], "the strategy must only make official JobSpecs"
    assert_kept(document, round_trip(document))


@BOUNDED
@given(
    document=jobspecs,
    key=st.text(min_size=1, max_size=20).filter(lambda key: key not in TOP_LEVEL_RESERVED),
    value=json_values,
)
def test_unknown_top_level_key_is_refused(document: dict[str, Any], key: str, value: Any) -> None:
    document = {**document, key: value}
    refusals = [e for e in OFFICIAL.iter_errors(document) if e.validator == "additionalProperties"]
    assert refusals and repr(key) in refusals[0].message
    problems = parse_problems(document)
    assert [field for field, _ in problems] == [key]
    assert "unknown" in problems[0][1]


def test_empty_unknown_top_level_key_is_named() -> None:
    # `""` is a JSON key like any other; the problem must point at it, not at the document.
    document = {"": 1}
    assert not OFFICIAL.is_valid(document)
    problems = parse_problems(document)
    assert len(problems) == 1
    assert problems[0][0] != "(document)", (
        f"the unknown key '' is reported as the whole document: {problems}"
    )


# --------------------------------------------------------------------------- examples


def example_of(name: str) -> dict[str, Any]:
    """The official schema `name` filled with the spec's own example values."""
    document = {}
    for key, schema in SCHEMAS[name]["properties"].items():
        if "example" in schema:
            document[key] = schema["example"]
        elif schema.get("examples"):
            document[key] = schema["examples"][0]
    return document


def full_example() -> dict[str, Any]:
    document = example_of("JobSpec")
    document["resources"] = example_of("ResourceSpec")
    attributes = example_of("JobAttributes")
    document["attributes"] = attributes
    document["container"] = {
        **example_of("Container"),
        "volume_mounts": [example_of("VolumeMount")],
    }
    return document


def test_spec_examples_form_a_full_valid_jobspec() -> None:
    document = full_example()
    assert set(document) == props("JobSpec")
    assert set(document["resources"]) == props("ResourceSpec") - {"attributes"}
    assert set(document["attributes"]) == props("JobAttributes") - {"attributes"}
    assert official_errors(document) == []
    job = parse_jobspec(document)
    assert_kept(document, job.model_dump(mode="json", exclude_unset=True))
    assert job.resources is not None
    assert job.resources.node_count == 2
    assert job.attributes is not None
    assert job.attributes.duration == 30
    assert job.container is not None
    assert job.container.volume_mounts[0].target == "/mnt/data"
    # The same document as JSON text.
    assert load_jobspec_text(json.dumps(document)) == job


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"resources": {"node_count": "2"}}, "resources.node_count"),
        ({"arguments": "x"}, "arguments"),
        ({"attributes": {"duration": 0}}, "attributes.duration"),
        ({"resources": {"exclusive_node_use": "yes"}}, "resources.exclusive_node_use"),
        ({"resources": {"process_count": True}}, "resources.process_count"),
        # No image and no flavours: refused on the container, whose message names `image`.
        ({"container": {"volume_mounts": []}}, "container"),
        (
            {"container": {"image": "x", "volume_mounts": [{"source": "/a"}]}},
            "container.volume_mounts[0].target",
        ),
        ({"environment": {"A": 1}}, "environment.A"),
        ({"executable": ""}, "executable"),
        ({"inherit_environment": None}, "inherit_environment"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_type_errors_are_refused_by_both(document: dict[str, Any], field: str) -> None:
    errors = list(OFFICIAL.iter_errors(document))
    assert errors, "the official schema must refuse it too"
    official = best_match(errors)
    assert official is not None
    assert json_path(official.absolute_path) in (field, field.rsplit(".", 1)[0])
    assert [problem_field for problem_field, _ in parse_problems(document)] == [field]


def test_integral_float_counts_are_integers_as_in_json_schema() -> None:
    # JSON Schema's "integer" is any number with a zero fractional part: 1.6e10 and 2.0 are
    # integers, so the official schema accepts this JobSpec, and Contract 1 says any valid
    # official JobSpec is accepted as it is.
    text = '{"resources": {"node_count": 2.0, "memory": 1.6e10}, "attributes": {"duration": 6e1}}'
    document = json.loads(text)
    assert official_errors(document) == []
    job = load_jobspec_text(text)
    assert job.resources is not None
    assert job.resources.node_count == 2
    assert job.resources.memory == 16_000_000_000
    assert job.attributes is not None
    assert job.attributes.duration == 60


EXTENDED_CONTAINER = {
    "image": "docker.io/library/ubuntu:24.04",
    "volume_mounts": [{"source": "/data", "target": "/mnt/data", "read_only": False}],
    "runtime": "apptainer",
    "gpu": True,
    "mpi": False,
    "devices": ["nvidia.com/gpu=all"],
    "network": "none",
    "workdir": "/work",
    "extra_options": {"apptainer": ["--writable-tmpfs"], "podman": ["--read-only"]},
}


def test_extensions_validate_and_stay_official() -> None:
    document = {
        "executable": "/usr/bin/python",
        "launcher": "srun",
        "resources": {"node_count": 2, "gpu_cores_per_process": 1},
        "container": EXTENDED_CONTAINER,
    }
    assert official_errors(document) == []
    job = parse_jobspec(document)
    container = job.container
    assert container is not None
    assert container.runtime == "apptainer"
    assert container.gpu is True
    assert container.mpi is False
    assert container.devices == ["nvidia.com/gpu=all"]
    assert container.network == "none"
    assert container.workdir == "/work"
    assert container.extra_options == {
        "apptainer": ["--writable-tmpfs"],
        "podman": ["--read-only"],
    }
    assert container.volume_mounts[0].read_only is False
    assert_kept(document, job.model_dump(mode="json", exclude_unset=True))


def test_extension_defaults_when_absent() -> None:
    container = parse_jobspec({"container": {"image": "ubuntu"}}).container
    assert container is not None
    assert container.runtime is None
    assert container.gpu is None
    assert container.mpi is None
    assert container.devices == []
    assert container.network == "host"
    assert container.workdir is None
    assert container.extra_options == {}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("runtime", "docker"),
        ("gpu", "yes"),
        ("mpi", 1),
        ("devices", "nvidia.com/gpu=all"),
        ("network", "bridge"),
        ("workdir", ""),
        ("extra_options", {"apptainer": "--writable-tmpfs"}),
    ],
)
def test_bad_extension_values_are_refused_by_us(name: str, value: Any) -> None:
    # The official Container allows any extra property, so only the gateway can refuse these.
    document = {"container": {"image": "ubuntu", name: value}}
    assert official_errors(document) == []
    fields = [field for field, _ in parse_problems(document)]
    assert fields and all(field.startswith(f"container.{name}") for field in fields)
