"""Facility profiles (docs/design.md Contract 4): the shipped ones, their schema, and broken ones.

Every shipped profile must load and follow the conventions of the site it models; the shipped
`schema.json` must be exactly what the models generate and must accept every shipped profile;
and a broken profile must be refused with the file, the 1-based line and the field path an
admin has to fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from ruamel.yaml import YAML

from iri_gateway.errors import ProfileError, ProfileIssue
from iri_gateway.models.profile import FacilityProfile, Resource, RuntimeConfig
from iri_gateway.profiles.loading import (
    ProfileRegistry,
    builtin_profiles_dir,
    load_profile,
    profile_json_schema,
)

PROFILES_DIR = builtin_profiles_dir()
SCHEMA_FILE = PROFILES_DIR / "schema.json"
SHIPPED_FILES = sorted(PROFILES_DIR.glob("*.yaml"))

# Resource id -> the shipped file that defines it (docs/design.md, Contract 4).
EXPECTED_RESOURCES = {
    "perlmutter-gpu": "nersc-perlmutter.yaml",
    "perlmutter-cpu": "nersc-perlmutter.yaml",
    "frontier": "olcf-frontier.yaml",
    "polaris": "alcf-polaris.yaml",
    "aurora": "alcf-aurora.yaml",
    "local": "local.yaml",
}
SITE_FILES = [
    "nersc-perlmutter.yaml",
    "olcf-frontier.yaml",
    "alcf-polaris.yaml",
    "alcf-aurora.yaml",
]


@pytest.fixture(scope="module")
def builtin() -> ProfileRegistry:
    return ProfileRegistry.builtin()


def resource(registry: ProfileRegistry, resource_id: str) -> Resource:
    return registry.get(resource_id).resource


def runtime(res: Resource, name: str) -> RuntimeConfig:
    config = res.runtimes.get(name)
    assert config is not None, f"{res.id} does not configure runtime {name!r}"
    return config


# --------------------------------------------------------------------------- shipped profiles


def test_the_expected_profiles_are_shipped() -> None:
    names = {path.name for path in SHIPPED_FILES}
    assert set(EXPECTED_RESOURCES.values()) <= names
    assert SCHEMA_FILE.is_file()


@pytest.mark.parametrize("path", SHIPPED_FILES, ids=lambda path: path.name)
def test_every_shipped_profile_loads(path: Path) -> None:
    profile = load_profile(path)
    assert isinstance(profile, FacilityProfile)
    assert profile.resources


def test_builtin_registry_has_the_expected_resources(builtin: ProfileRegistry) -> None:
    assert set(EXPECTED_RESOURCES) <= set(builtin.ids())
    for resource_id, file_name in EXPECTED_RESOURCES.items():
        loaded = builtin.get(resource_id)
        assert loaded.source.name == file_name, resource_id
        assert loaded.id == resource_id


@pytest.mark.parametrize("file_name", SITE_FILES)
def test_site_profiles_are_marked_as_examples(file_name: str) -> None:
    profile = load_profile(PROFILES_DIR / file_name)
    assert profile.facility.example is True
    assert profile.facility.sources, "an example profile names the public documents it follows"
    assert all(source.startswith("https://") for source in profile.facility.sources)


def test_local_profile_is_not_an_example(builtin: ProfileRegistry) -> None:
    local = builtin.get("local")
    assert local.profile.facility.example is False
    assert local.resource.scheduler.kind == "local"
    assert local.resource.nodes.count == 1
    assert local.resource.runtimes.default == "podman"
    assert runtime(local.resource, "podman").image_forms


def test_perlmutter_gpu_conventions(builtin: ProfileRegistry) -> None:
    res = resource(builtin, "perlmutter-gpu")
    assert res.scheduler.kind == "slurm"
    assert res.runtimes.default == "podman-hpc"
    podman_hpc = runtime(res, "podman-hpc")
    assert podman_hpc.gpu is not None
    assert podman_hpc.gpu.flags == ["--gpu"]
    assert podman_hpc.mpi is not None
    assert podman_hpc.mpi.flags == ["--mpi"]
    assert podman_hpc.mpi.gpu_flags == ["--cuda-mpi"]
    assert "shifter" in res.runtimes.available()
    runtime(res, "shifter")
    assert res.nodes.gpus is not None
    assert res.nodes.gpus.vendor == "nvidia"
    assert res.nodes.gpus.count == 4
    assert res.nodes.gpus.model == "a100"
    assert res.mpi is not None
    assert res.mpi.flavour == "cray-mpich"
    assert res.mpi.launcher == "srun"


def test_perlmutter_cpu_conventions(builtin: ProfileRegistry) -> None:
    res = resource(builtin, "perlmutter-cpu")
    assert res.scheduler.kind == "slurm"
    assert res.nodes.gpus is None
    assert res.runtimes.default == "podman-hpc"
    assert {"podman-hpc", "shifter"} <= set(res.runtimes.available())
    assert runtime(res, "podman-hpc").gpu is None


def test_frontier_conventions(builtin: ProfileRegistry) -> None:
    res = resource(builtin, "frontier")
    assert res.scheduler.kind == "slurm"
    assert res.runtimes.default == "apptainer"
    apptainer = runtime(res, "apptainer")
    assert apptainer.gpu is not None
    assert "--rocm" in apptainer.gpu.flags
    assert res.nodes.gpus is not None
    assert res.nodes.gpus.vendor == "amd"
    assert res.nodes.gpus.rocm is not None
    assert res.nodes.gpus.cuda is None
    assert res.nodes.gpus.count == 8
    assert res.nodes.gpus.model == "mi250x"


def test_polaris_conventions(builtin: ProfileRegistry) -> None:
    res = resource(builtin, "polaris")
    assert res.scheduler.kind == "pbs"
    assert "-l filesystems=home:eagle" in res.scheduler.directives
    assert res.runtimes.default == "apptainer"
    apptainer = runtime(res, "apptainer")
    assert "--fakeroot" in apptainer.flags
    assert apptainer.gpu is not None
    assert apptainer.gpu.flags == ["--nv"]
    assert res.nodes.gpus is not None
    assert res.nodes.gpus.vendor == "nvidia"
    assert res.nodes.gpus.count == 4


def test_aurora_conventions(builtin: ProfileRegistry) -> None:
    res = resource(builtin, "aurora")
    assert res.scheduler.kind == "pbs"
    assert res.runtimes.default == "apptainer"
    assert res.nodes.gpus is not None
    assert res.nodes.gpus.vendor == "intel"
    apptainer = runtime(res, "apptainer")
    assert apptainer.gpu is not None
    assert "APPTAINERENV_ZE_FLAT_DEVICE_HIERARCHY" in apptainer.gpu.env


# --------------------------------------------------------------------------- schema drift

REGENERATE = "iri-gateway profile schema > facility_profiles/schema.json"


def test_shipped_schema_matches_the_models() -> None:
    shipped = SCHEMA_FILE.read_text(encoding="utf-8")
    assert shipped == profile_json_schema(), (
        f"{SCHEMA_FILE} is out of date with models/profile.py; regenerate it with:\n"
        f"    {REGENERATE}"
    )


@pytest.fixture(scope="module")
def schema_validator() -> Draft202012Validator:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _yaml_data(text: str) -> object:
    return YAML(typ="safe", pure=True).load(text)


@pytest.mark.parametrize("path", SHIPPED_FILES, ids=lambda path: path.name)
def test_every_shipped_profile_validates_against_schema_json(
    path: Path, schema_validator: Draft202012Validator
) -> None:
    errors = [
        f"{'/'.join(str(part) for part in error.absolute_path)}: {error.message}"
        for error in schema_validator.iter_errors(_yaml_data(path.read_text(encoding="utf-8")))
    ]
    assert errors == []


# --------------------------------------------------------------------------- broken profiles

# A small valid profile. Block style throughout so every key has a line of its own.
BASE = """\
facility:
  id: demo
  name: Demo facility
resources:
  - id: demo-gpu
    name: Demo GPU cluster
    scheduler:
      kind: slurm
    queues:
      - name: batch
        default: true
        max_walltime: 7200
        default_walltime: 600
    nodes:
      count: 4
      cpu:
        arch: x86_64
        cores: 8
      memory_gib: 64
      gpus:
        count: 2
        vendor: nvidia
        model: a100
        cuda: "12.2"
    runtimes:
      default: apptainer
      apptainer:
        gpu:
          flags: ["--nv"]
        image_forms: [sif, docker-uri]
        allowed_extra_options:
          - "--writable-tmpfs"
"""


def line_of(text: str, needle: str) -> int:
    """The 1-based number of the one line of `text` that contains `needle`."""
    numbers = [n for n, line in enumerate(text.splitlines(), start=1) if needle in line]
    assert len(numbers) == 1, f"{needle!r} is on lines {numbers}; make it unique"
    return numbers[0]


def mutate(old: str, new: str, text: str = BASE) -> str:
    assert text.count(old) == 1, f"{old!r} must occur exactly once"
    return text.replace(old, new)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def refused(path: Path) -> ProfileError:
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    assert caught.value.issues, "a ProfileError carries at least one issue"
    return caught.value


def issue_for(error: ProfileError, field: str) -> ProfileIssue:
    matching = [issue for issue in error.issues if issue.field == field]
    assert matching, f"no issue for {field!r}; got {error.issues}"
    return matching[0]


def assert_located(issue: ProfileIssue, path: Path, line: int, field: str) -> None:
    assert issue.file == str(path)
    assert issue.line == line, f"expected line {line}, got {issue}"
    assert issue.field == field
    assert str(issue) == f"{path}:{line}: {field}: {issue.reason}"


def test_base_profile_is_valid(tmp_path: Path, schema_validator: Draft202012Validator) -> None:
    profile = load_profile(write(tmp_path, "base.yaml", BASE))
    assert profile.resources[0].id == "demo-gpu"
    assert schema_validator.is_valid(_yaml_data(BASE))
    assert line_of(BASE, "facility:") == 1
    assert line_of(BASE, "- id: demo-gpu") == 5


def test_misspelt_key(tmp_path: Path, schema_validator: Draft202012Validator) -> None:
    text = mutate("    scheduler:\n", "    shceduler:\n")
    path = write(tmp_path, "typo.yaml", text)
    error = refused(path)
    issue = issue_for(error, "resources[0].shceduler")
    assert_located(issue, path, line_of(text, "shceduler:"), "resources[0].shceduler")
    assert "unknown key" in issue.reason
    assert f"{path}:{line_of(text, 'shceduler:')}: resources[0].shceduler: unknown key" in str(
        error
    )
    # schema.json refuses it too, so editors flag the typo before the gateway does.
    assert not schema_validator.is_valid(_yaml_data(text))


def test_wrong_type(tmp_path: Path) -> None:
    text = mutate("cores: 8", "cores: many")
    path = write(tmp_path, "type.yaml", text)
    error = refused(path)
    assert len(error.issues) == 1
    field = "resources[0].nodes.cpu.cores"
    assert_located(error.issues[0], path, line_of(text, "cores: many"), field)
    assert "integer" in error.issues[0].reason
    assert str(error) == f"{path}:{line_of(text, 'cores: many')}: {field}: " + (
        error.issues[0].reason
    )


def test_wrong_type_in_flow_mapping(tmp_path: Path) -> None:
    text = mutate(
        "      cpu:\n        arch: x86_64\n        cores: 8\n",
        "      cpu: {arch: x86_64, cores: many}\n",
    )
    path = write(tmp_path, "flow.yaml", text)
    error = refused(path)
    assert_located(
        issue_for(error, "resources[0].nodes.cpu.cores"),
        path,
        line_of(text, "cores: many"),
        "resources[0].nodes.cpu.cores",
    )


def test_missing_required_field(tmp_path: Path) -> None:
    text = mutate("        image_forms: [sif, docker-uri]\n", "")
    path = write(tmp_path, "required.yaml", text)
    error = refused(path)
    field = "resources[0].runtimes.apptainer.image_forms"
    issue = issue_for(error, field)
    # The key is absent, so the issue points at the runtime that lacks it.
    assert_located(issue, path, line_of(text, "  apptainer:"), field)
    assert "required" in issue.reason.lower()


def test_default_runtime_not_configured(tmp_path: Path) -> None:
    text = mutate("default: apptainer", "default: podman")
    path = write(tmp_path, "default.yaml", text)
    error = refused(path)
    issue = issue_for(error, "resources[0].runtimes")
    assert_located(issue, path, line_of(text, "runtimes:"), "resources[0].runtimes")
    assert "'podman'" in issue.reason
    assert "not configured" in issue.reason
    assert "apptainer" in issue.reason  # what is configured instead


def test_cuda_on_amd_gpu(tmp_path: Path) -> None:
    text = mutate("vendor: nvidia", "vendor: amd")
    path = write(tmp_path, "cuda.yaml", text)
    error = refused(path)
    issue = issue_for(error, "resources[0].nodes.gpus")
    assert_located(issue, path, line_of(text, "gpus:"), "resources[0].nodes.gpus")
    assert "cuda" in issue.reason
    assert "amd" in issue.reason


def test_default_walltime_over_max(tmp_path: Path) -> None:
    text = mutate("default_walltime: 600", "default_walltime: 9000")
    path = write(tmp_path, "walltime.yaml", text)
    error = refused(path)
    issue = issue_for(error, "resources[0].queues[0]")
    assert_located(issue, path, line_of(text, "- name: batch"), "resources[0].queues[0]")
    assert "9000" in issue.reason
    assert "7200" in issue.reason


def test_invalid_regular_expression(tmp_path: Path) -> None:
    text = mutate('"--writable-tmpfs"', '"--bind=(unclosed"')
    path = write(tmp_path, "regex.yaml", text)
    error = refused(path)
    field = "resources[0].runtimes.apptainer.allowed_extra_options"
    issue = issue_for(error, field)
    assert_located(issue, path, line_of(text, "allowed_extra_options:"), field)
    assert "--bind=(unclosed" in issue.reason
    assert "regular expression" in issue.reason


def test_yaml_syntax_error(tmp_path: Path) -> None:
    text = mutate("name: Demo GPU cluster", "name: Demo GPU cluster: oops")
    path = write(tmp_path, "syntax.yaml", text)
    error = refused(path)
    assert len(error.issues) == 1
    issue = error.issues[0]
    assert issue.file == str(path)
    assert issue.line == line_of(text, "cluster: oops")
    assert "YAML" in issue.reason
    assert str(error).startswith(f"{path}:{issue.line}: ")


def test_duplicate_yaml_key(tmp_path: Path) -> None:
    text = mutate("    runtimes:\n", "    nodes: {}\n    runtimes:\n")
    path = write(tmp_path, "dupkey.yaml", text)
    error = refused(path)
    assert error.issues[0].file == str(path)
    assert error.issues[0].line == line_of(text, "nodes: {}")
    assert "duplicate" in error.issues[0].reason


@pytest.mark.parametrize(
    "text", ["- a\n- list\n", "just a string\n", ""], ids=["list", "scalar", "empty"]
)
def test_not_a_mapping(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, "notmap.yaml", text)
    error = refused(path)
    assert len(error.issues) == 1
    issue = error.issues[0]
    assert (issue.file, issue.line) == (str(path), 1)
    assert "mapping" in issue.reason
    assert str(error) == f"{path}:1: {issue.reason}"


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    error = refused(path)
    assert len(error.issues) == 1
    issue = error.issues[0]
    assert issue.file == str(path)
    assert issue.line is None
    assert "cannot read" in issue.reason
    assert str(error).startswith(f"{path}: cannot read")


def test_same_resource_in_two_files(tmp_path: Path) -> None:
    first = write(tmp_path, "first.yaml", BASE)
    second = write(tmp_path, "second.yaml", mutate("id: demo\n", "id: other\n"))
    with pytest.raises(ProfileError) as caught:
        ProfileRegistry.from_files([first, second])
    message = str(caught.value)
    assert str(first) in message
    assert str(second) in message
    assert "demo-gpu" in message
    assert caught.value.issues[0].field == "resources"


def test_ssh_connection_without_ssh_block(tmp_path: Path) -> None:
    text = mutate("    runtimes:\n", "    connection:\n      mode: ssh\n    runtimes:\n")
    path = write(tmp_path, "ssh.yaml", text)
    error = refused(path)
    issue = issue_for(error, "resources[0].connection")
    assert_located(issue, path, line_of(text, "connection:"), "resources[0].connection")
    assert "ssh" in issue.reason


def test_ssh_connection_with_ssh_block_loads(tmp_path: Path) -> None:
    text = mutate(
        "    runtimes:\n",
        "    connection:\n      mode: ssh\n      ssh:\n        host: login.example.org\n"
        "        known_hosts: /etc/iri/known_hosts\n    runtimes:\n",
    )
    profile = load_profile(write(tmp_path, "ssh-ok.yaml", text))
    connection = profile.resources[0].connection
    assert connection.mode == "ssh"
    assert connection.ssh is not None
    assert connection.ssh.port == 22


def test_broken_files_are_reported_together(tmp_path: Path) -> None:
    typo_text = mutate("    scheduler:\n", "    shceduler:\n")
    typo = write(tmp_path, "a-typo.yaml", typo_text)
    good = write(tmp_path, "b-good.yaml", mutate("id: demo-gpu", "id: demo-ok"))
    cuda_text = mutate("id: demo-gpu", "id: demo-amd", mutate("vendor: nvidia", "vendor: amd"))
    cuda = write(tmp_path, "c-cuda.yaml", cuda_text)
    missing = tmp_path / "d-missing.yaml"
    with pytest.raises(ProfileError) as caught:
        ProfileRegistry.from_files([typo, good, cuda, missing])
    issues = caught.value.issues
    assert {issue.file for issue in issues} == {str(typo), str(cuda), str(missing)}
    message = str(caught.value)
    assert f"{typo}:{line_of(typo_text, 'shceduler:')}: resources[0].shceduler: " in message
    assert f"{cuda}:{line_of(cuda_text, 'gpus:')}: resources[0].nodes.gpus: " in message
    assert f"{missing}: cannot read" in message
    # The same through from_paths on the folder (name order).
    with pytest.raises(ProfileError) as caught_dir:
        ProfileRegistry.from_paths([tmp_path])
    assert {issue.file for issue in caught_dir.value.issues} == {str(typo), str(cuda)}


def test_quoted_number_is_a_type_error_as_in_schema_json(
    tmp_path: Path, schema_validator: Draft202012Validator
) -> None:
    text = mutate("cores: 8", 'cores: "8"')
    path = write(tmp_path, "quoted.yaml", text)
    error = refused(path)
    assert_located(
        error.issues[0], path, line_of(text, 'cores: "8"'), "resources[0].nodes.cpu.cores"
    )
    assert not schema_validator.is_valid(_yaml_data(text))


def test_runtime_keys_are_spelt_as_in_the_schema(tmp_path: Path) -> None:
    text = mutate("      apptainer:", "      podman_hpc:")
    path = write(tmp_path, "alias.yaml", text)
    error = refused(path)
    assert any(issue.field.endswith("podman_hpc") for issue in error.issues)
