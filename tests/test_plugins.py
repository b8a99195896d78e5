"""One plug-in per axis: a container runtime is one module plus one template, a scheduler one
package; each is found by the registry of its axis, and nothing else names it.

The proof: `Tiny`, a runtime written in this test module (it runs the command through `env`
with the image in a variable), is registered, given its launch-line template in the profile's
own `templates_dir`, and then accepted by the JobSpec, configured by a profile, listed in both
JSON Schemas, detected on this machine, negotiated, rendered and run, with no other change.
"""

from __future__ import annotations

import importlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, get_args

import pytest

from iri_gateway.errors import InvalidJobSpecError, ProfileError
from iri_gateway.models import images
from iri_gateway.models.images import ImageRef
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.models.profile import FacilityProfile
from iri_gateway.models.scheduler_kinds import SchedulerKind
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.planner import make_plan
from iri_gateway.planning.render import builtin_templates_dir
from iri_gateway.plugins import discover
from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.profiles.local_runtimes import registry_for_this_machine
from iri_gateway.runtimes import RUNTIMES, Runtime
from iri_gateway.runtimes.base import Invocation, command_of
from iri_gateway.runtimes.registry import RuntimeRegistry
from iri_gateway.schedulers import SCHEDULERS
from iri_gateway.schedulers.batch import BatchSystem
from iri_gateway.service.operations.backends import Backends

if TYPE_CHECKING:
    from iri_gateway.models.plan import Decision

SHIPPED_RUNTIMES = (
    "apptainer",
    "podman-hpc",
    "shifter",
    "podman",
    "charliecloud",
    "slurm-oci",
    "none",
)
IMAGE = "docker.io/library/busybox:latest"


class Tiny(Runtime):
    """A runtime of a few lines: `env TINY_IMAGE=<image> command...`."""

    name = "tiny"
    program = "env"
    image_forms = frozenset({"oci"})

    def image_reference(self, ref: ImageRef) -> str | None:
        return images.oci_name(ref)

    def invocation(self, decision: Decision) -> Invocation:
        return Invocation(
            executable=self.executable(decision),
            options=[f"TINY_IMAGE={decision.image}"],
            image=decision.image,
            command=command_of(decision),
        )


TINY_TEMPLATE = "{{ (launcher + [rt.executable] + rt.options + rt.command) | shjoin }}\n"

TINY_SITE = """\
facility:
  id: tinysite
  name: A site with the tiny runtime
resources:
  - id: tiny-local
    name: This machine, tiny containers
    templates_dir: site-templates
    scheduler:
      kind: local
    queues:
      - name: local
        default: true
    nodes:
      count: 1
      cpu: {arch: x86_64, cores: 2}
      memory_gib: 4
    runtimes:
      default: tiny
      tiny:
        image_forms: [oci]
"""


@pytest.fixture
def tiny() -> Iterator[Tiny]:
    """Tiny, registered for the test only."""
    runtime = Tiny()
    RUNTIMES.add(runtime)
    try:
        yield runtime
    finally:
        RUNTIMES.remove(runtime.name)


@pytest.fixture
def tiny_site(tmp_path: Path) -> Path:
    """A profile offering Tiny, with Tiny's template in the profile's own templates folder."""
    template = tmp_path / "site-templates" / "runtimes" / "tiny.sh.j2"
    template.parent.mkdir(parents=True)
    template.write_text(TINY_TEMPLATE)
    profile = tmp_path / "tinysite.yaml"
    profile.write_text(TINY_SITE)
    return profile


def test_the_shipped_runtimes_keep_their_order() -> None:
    assert RUNTIMES.names() == SHIPPED_RUNTIMES
    assert RUNTIMES.container_names() == SHIPPED_RUNTIMES[:-1]


def test_every_shipped_runtime_has_its_template() -> None:
    for runtime in RUNTIMES:
        assert (builtin_templates_dir() / runtime.template).is_file(), runtime.name


def test_a_runtime_from_a_test_module_renders_and_runs(
    tiny: Tiny, tiny_site: Path, tmp_path: Path
) -> None:
    loaded = ProfileRegistry.from_files([tiny_site]).get("tiny-local")
    assert loaded.resource.runtimes.available() == ["tiny"]
    assert loaded.facts["runtime"] == ["tiny", "none"]
    spec = parse_jobspec(
        {
            "executable": "/bin/sh",
            "arguments": ["-c", 'echo "ran in $TINY_IMAGE"'],
            "container": {"image": IMAGE, "runtime": "tiny"},
        }
    )
    plan = make_plan(spec, loaded)
    assert plan.runtime == "tiny"
    assert f"env TINY_IMAGE={IMAGE} /bin/sh -c 'echo \"ran in $TINY_IMAGE\"'\n" in plan.script
    script = tmp_path / "job.sh"
    script.write_text(plan.script)
    ran = subprocess.run(
        ["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=30, check=False
    )
    assert (ran.returncode, ran.stdout) == (0, f"ran in {IMAGE}\n"), ran.stderr


def test_a_registered_runtime_is_in_both_json_schemas(tiny: Tiny) -> None:
    container = JobSpec.model_json_schema()["$defs"]["Container"]
    assert container["properties"]["runtime"]["anyOf"][0]["enum"] == [
        *SHIPPED_RUNTIMES[:-1],
        "tiny",
        "none",
    ]
    runtimes = FacilityProfile.model_json_schema(by_alias=True)["$defs"]["Runtimes"]
    assert "tiny" in runtimes["properties"]
    assert runtimes["additionalProperties"] is False


def test_detection_of_a_registered_runtime_needs_no_code_of_its_own(
    tiny: Tiny, tiny_site: Path
) -> None:
    """Tiny says nothing about detection: the default looks for its program (`env`)."""
    registry = ProfileRegistry.from_files([tiny_site])
    found, notes = registry_for_this_machine(registry, which=lambda name: f"/usr/bin/{name}")
    assert found.get("tiny-local").resource.runtimes.available() == ["tiny"] and notes == []
    asked: list[str] = []
    missing, notes = registry_for_this_machine(registry, which=lambda name: asked.append(name))
    assert asked == ["env"]
    assert missing.get("tiny-local").resource.runtimes.default == "none"
    assert notes == ["tiny-local: tiny not found on this machine; jobs there run without it"]


def test_an_unregistered_runtime_is_refused_as_a_literal_would_be(tiny_site: Path) -> None:
    with pytest.raises(InvalidJobSpecError) as caught:
        parse_jobspec({"executable": "/bin/true", "container": {"image": IMAGE, "runtime": "tiny"}})
    [problem] = caught.value.problems
    assert problem.field == "container.runtime"
    assert problem.reason == (
        "Input should be 'apptainer', 'podman-hpc', 'shifter', 'podman', "
        "'charliecloud', 'slurm-oci' or 'none'"
    )
    with pytest.raises(ProfileError) as refused:
        ProfileRegistry.from_files([tiny_site])
    fields = {issue.field: issue.reason for issue in refused.value.issues}
    assert fields["resources[0].runtimes.tiny"] == (
        "unknown key (check the spelling against schema.json)"
    )


def test_a_module_that_defines_the_attribute_is_a_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dropping a module into the axis's package is all it takes; shared code is skipped."""
    package = tmp_path / "plugin_axis_for_test"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "helpers.py").write_text("SHARED = True\n")
    (package / "zeta.py").write_text("RUNTIME = 'z'\n")
    (package / "alpha.py").write_text("RUNTIME = 'a'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert discover(importlib.import_module("plugin_axis_for_test"), "RUNTIME") == [
        ("plugin_axis_for_test.alpha", "a"),
        ("plugin_axis_for_test.zeta", "z"),
    ]


def test_a_runtime_name_is_registered_once() -> None:
    registry = RuntimeRegistry([Tiny()])
    with pytest.raises(ValueError, match="registered twice"):
        registry.add(Tiny())

    class Badly(Tiny):
        name = "Tiny_Runtime"

    with pytest.raises(ValueError, match="lower-case"):
        registry.add(Badly())


def test_every_scheduler_kind_of_a_profile_has_one_plugin() -> None:
    assert sorted(SCHEDULERS) == sorted(get_args(SchedulerKind))
    for kind, plugin in SCHEDULERS.items():
        assert plugin.kind == kind
        assert (builtin_templates_dir() / plugin.template).is_file(), kind


def test_backends_take_the_batch_system_from_the_plugin(tmp_path: Path) -> None:
    from iri_gateway.schedulers.local.batch import LocalBatch

    local = ProfileRegistry.builtin().get("local")
    backend = Backends(tmp_path).get(local, "alice")
    assert isinstance(backend.batch, LocalBatch)
    assert backend.batch.root == tmp_path / "local-jobs"
    batch: BatchSystem = SCHEDULERS["local"].batch_factory(
        transport=backend.transport, config=local.resource.scheduler, data_dir=tmp_path
    )
    assert isinstance(batch, LocalBatch)
