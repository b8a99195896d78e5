"""Job templates, expanded without a server: precedence (image < template < job), counts
inside each role's min..max, refusals that name what is wrong and what exists, the bootstrap
script as argv, and the expanded job planned and rendered on real resources."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from iri_gateway.errors import InvalidJobSpecError
from iri_gateway.models.job_templates import Template
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.models.limits import MAX_ENVIRONMENT, MAX_ITEMS
from iri_gateway.planning.job_templates import expand
from iri_gateway.planning.planner import make_plan
from iri_gateway.profiles.loading import ProfileRegistry

TEMPLATE: TypeAdapter[Template] = TypeAdapter(Template)


def book(**documents: dict[str, Any]) -> dict[str, Template]:
    return {name: TEMPLATE.validate_python(document) for name, document in documents.items()}


TEMPLATES = book(
    base={
        "kind": "task",
        "image": "docker.io/lab/base:1",
        "executable": "/opt/run",
        "arguments": ["--from-template"],
        "environment": {"A": "template", "B": "template"},
        "volume_mounts": [
            {"source": "/srv/data", "target": "/data"},
            {"source": "/srv/ref", "target": "/ref"},
        ],
        "resources": {"cpu_cores_per_process": 4, "memory": 2**30},
    },
    master={
        "kind": "task",
        "image": "docker.io/lab/spark:3",
        "executable": "/opt/master",
        "environment": {"ROLE_VAR": "master"},
    },
    worker={
        "kind": "task",
        "image": "docker.io/lab/spark:3",
        "executable": "/opt/worker",
        "arguments": ["--threads", "4"],
        "environment": {"ROLE_VAR": "worker", "T": "t"},
        "bootstrap": "export READY=1\ncd /scratch",
        "resources": {"cpu_cores_per_process": 2},
    },
    spark={
        "kind": "cluster",
        "description": "Spark: one master, 1 to 8 workers",
        "roles": [
            {"name": "master", "task": "master"},
            {"name": "worker", "task": "worker", "min": 1, "max": 8, "count": 2},
        ],
    },
)


def expanded(document: dict[str, Any], templates: dict[str, Template] | None = None) -> JobSpec:
    return expand(JobSpec.model_validate(document), templates or TEMPLATES).spec


def refusal(document: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    with pytest.raises(InvalidJobSpecError) as caught:
        expanded(document)
    return [(p.field, p.reason, p.offered) for p in caught.value.problems]


def test_a_task_template_fills_what_the_job_leaves_out() -> None:
    spec = expanded({"template": "base"})
    assert spec.template is None, "the expanded job names no template: it is plain"
    assert spec.container is not None and spec.container.image == "docker.io/lab/base:1"
    assert (spec.executable, spec.arguments) == ("/opt/run", ["--from-template"])
    assert spec.environment == {"A": "template", "B": "template"}
    assert [m.target for m in spec.container.volume_mounts] == ["/data", "/ref"]
    assert spec.resources is not None and spec.resources.cpu_cores_per_process == 4


def test_the_jobs_fields_win_over_the_templates() -> None:
    spec = expanded(
        {
            "template": "base",
            "container": {
                "image": "docker.io/lab/mine:2",
                "volume_mounts": [{"source": "/tmp/x", "target": "/data"}],
            },
            "executable": "/bin/mine",
            "environment": {"B": "job", "C": "job"},
            "resources": {"cpu_cores_per_process": 1, "node_count": 2},
        }
    )
    assert spec.container is not None and spec.container.image == "docker.io/lab/mine:2"
    assert (spec.executable, spec.arguments) == ("/bin/mine", []), (
        "a job's executable brings its own arguments, not the template's"
    )
    assert spec.environment == {"A": "template", "B": "job", "C": "job"}
    assert {m.target: m.source for m in spec.container.volume_mounts} == {
        "/data": "/tmp/x",
        "/ref": "/srv/ref",
    }
    assert spec.resources is not None
    assert (
        spec.resources.cpu_cores_per_process,
        spec.resources.memory,
        spec.resources.node_count,
    ) == (1, 2**30, 2)


def test_arguments_alone_keep_the_templates_program() -> None:
    spec = expanded({"template": "base", "arguments": ["--mine"]})
    assert (spec.executable, spec.arguments) == ("/opt/run", ["--mine"])


def test_what_neither_sets_is_the_images_own(registry: ProfileRegistry) -> None:
    """image < template < job: with no executable in template or job the image's entrypoint
    runs (no --entrypoint); the template's executable replaces it; the job's replaces that."""
    templates = book(
        plain={"kind": "task", "image": "docker.io/library/bash:5"},
        program={
            "kind": "task",
            "image": "docker.io/library/bash:5",
            "executable": "/usr/local/bin/bash",
        },
    )
    local = registry.get("local")
    image_only = make_plan(expanded({"template": "plain"}, templates), local).script
    assert "--entrypoint" not in image_only and "docker.io/library/bash:5" in image_only
    templated = make_plan(expanded({"template": "program"}, templates), local).script
    assert """'--entrypoint=["/usr/local/bin/bash"]'""" in templated
    job = make_plan(
        expanded({"template": "program", "executable": "/bin/true"}, templates), local
    ).script
    assert """'--entrypoint=["/bin/true"]'""" in job


def test_a_cluster_template_builds_the_roles_with_the_chosen_counts() -> None:
    spec = expanded({"template": "spark", "roles": [{"name": "worker", "count": 5}]})
    assert spec.roles is not None
    assert [(r.name, r.count) for r in spec.roles] == [("master", 1), ("worker", 5)]
    master, worker = spec.roles
    assert master.executable == "/opt/master" and master.environment == {"ROLE_VAR": "master"}
    assert master.container is not None and master.container.image == "docker.io/lab/spark:3"
    assert worker.resources is not None and worker.resources.cpu_cores_per_process == 2
    assert worker.executable == "/bin/sh"
    assert worker.arguments == [
        "-c",
        'export READY=1\ncd /scratch\nexec "$0" "$@"',
        "/opt/worker",
        "--threads",
        "4",
    ]
    default = expanded({"template": "spark"})
    assert [(r.name, r.count) for r in default.roles or []] == [("master", 1), ("worker", 2)]


def test_in_a_cluster_the_jobs_top_level_and_role_entries_win() -> None:
    spec = expanded(
        {
            "template": "spark",
            "environment": {"ROLE_VAR": "job"},
            "container": {"image": "docker.io/lab/spark:4"},
            "roles": [
                {
                    "name": "worker",
                    "count": 1,
                    "environment": {"T": "role"},
                    "arguments": ["--threads", "1"],
                }
            ],
        }
    )
    master, worker = spec.roles or []
    assert master.environment == {}, "the job's top-level ROLE_VAR is left to apply"
    assert master.container is None, "the job's top-level image applies to every role"
    assert worker.environment == {"T": "role"}
    assert worker.arguments == [
        "-c",
        'export READY=1\ncd /scratch\nexec "$0" "$@"',
        "/opt/worker",
        "--threads",
        "1",
    ]


def test_a_count_outside_the_limits_names_the_role_and_the_range() -> None:
    assert refusal(
        {
            "template": "spark",
            "roles": [{"name": "worker", "count": 9}, {"name": "master", "count": 2}],
        }
    ) == [
        (
            "roles[0].count",
            "role 'worker' of template 'spark' takes 1 to 8 members; 9 asked for",
            "1..8",
        ),
        (
            "roles[1].count",
            "role 'master' of template 'spark' takes 1 to 1 members; 2 asked for",
            "1..1",
        ),
    ]


def test_unknown_templates_and_roles_name_the_closest() -> None:
    assert refusal({"template": "sparks"}) == [
        ("template", "no template named 'sparks'", "closest: spark")
    ]
    assert refusal({"template": "spark", "roles": [{"name": "workers", "count": 2}]}) == [
        ("roles[0].name", "template 'spark' has no role 'workers'", "closest: worker")
    ]
    assert refusal({"template": "zzz"})[0][2] == "known: base, master, spark, worker"


def test_a_bootstrap_needs_a_program() -> None:
    templates = book(boot={"kind": "task", "image": "docker.io/lab/x:1", "bootstrap": "echo hi"})
    with pytest.raises(InvalidJobSpecError) as caught:
        expanded({"template": "boot"}, templates)
    assert caught.value.problems[0].field == "executable"
    assert "bootstrap" in caught.value.problems[0].reason
    assert expanded({"template": "boot", "executable": "/bin/app"}, templates).arguments == [
        "-c",
        'echo hi\nexec "$0" "$@"',
        "/bin/app",
    ]


def test_a_task_template_with_roles_is_refused() -> None:
    assert refusal({"template": "base", "roles": [{"name": "worker", "count": 2}]})[0][0] == (
        "roles"
    )


def test_the_bootstrap_and_the_program_stay_argv(tmp_path: Any) -> None:
    """Names and values never become shell text: a program and arguments full of quotes and
    `$(...)` reach the program unchanged, after the bootstrap ran, in a real shell."""
    marker = tmp_path / "ran"
    templates = book(boot={"kind": "task", "bootstrap": f"touch '{marker}'\nexport X=boot"})
    tricky = ["it's", "$(touch /tmp/never)", '"; rm -rf /; "', "a b"]
    spec = expanded(
        {"template": "boot", "executable": "/usr/bin/printf", "arguments": ["%s|", *tricky]},
        templates,
    )
    assert spec.executable is not None
    done = subprocess.run(
        [spec.executable, *spec.arguments], capture_output=True, text=True, check=True
    )
    assert done.stdout == "".join(f"{word}|" for word in tricky)
    assert marker.exists()


def test_template_bodies_have_the_jobspecs_limits() -> None:
    with pytest.raises(ValidationError, match="at most 1024"):
        TEMPLATE.validate_python(
            {"kind": "task", "environment": {f"V{i}": "x" for i in range(MAX_ENVIRONMENT + 1)}}
        )
    with pytest.raises(ValidationError):
        TEMPLATE.validate_python({"kind": "task", "bootstrap": "x" * 70000})
    with pytest.raises(ValidationError):
        TEMPLATE.validate_python(
            {
                "kind": "cluster",
                "roles": [
                    {"name": f"r{chr(97 + i % 26)}x", "task": "t"} for i in range(MAX_ITEMS + 1)
                ],
            }
        )
    with pytest.raises(ValidationError, match="min 3 is above max 2"):
        TEMPLATE.validate_python(
            {"kind": "cluster", "roles": [{"name": "worker", "task": "t", "min": 3, "max": 2}]}
        )
    with pytest.raises(ValidationError, match="template names"):
        JobSpec.model_validate({"template": "../etc"})


def test_a_profile_ships_templates_the_offline_cli_uses(tmp_path: Any) -> None:
    """A facility's `templates:` section: loaded with the profile, checked (a cluster role
    must name one of its task templates, at its file and line), and applied by
    `iri-gateway plan` and `render` offline."""
    import sys

    from iri_gateway.shipped import shipped_dir

    shipped = (shipped_dir("facility_profiles") / "local.yaml").read_text(encoding="utf-8")
    profile = tmp_path / "site.yaml"
    profile.write_text(
        shipped + "templates:\n  hello:\n    kind: task\n"
        "    executable: /bin/echo\n    arguments: [hello]\n"
        "  pair:\n    kind: cluster\n    roles:\n"
        "      - {name: node, task: hello, min: 1, max: 2}\n",
        encoding="utf-8",
    )
    job = tmp_path / "job.json"
    job.write_text('{"template": "pair", "roles": [{"name": "node", "count": 2}]}')
    planned = subprocess.run(
        [sys.executable, "-m", "iri_gateway", "plan", str(job), "--profile", str(profile)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    import json

    plan = json.loads(planned.stdout)
    assert plan["template"] == "pair"
    assert [(r["name"], r["count"]) for r in plan["cluster"]["roles"]] == [("node", 2)]
    job.write_text('{"template": "pair", "roles": [{"name": "node", "count": 3}]}')
    refused = subprocess.run(
        [sys.executable, "-m", "iri_gateway", "render", str(job), "--profile", str(profile)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2
    assert "roles[0].count: role 'node' of template 'pair' takes 1 to 2" in refused.stderr

    broken = tmp_path / "broken.yaml"
    broken.write_text(
        shipped + "templates:\n  pair:\n    kind: cluster\n    roles:\n"
        "      - {name: node, task: nothing}\n",
        encoding="utf-8",
    )
    checked = subprocess.run(
        [sys.executable, "-m", "iri_gateway", "profile", "check", str(broken)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode != 0
    assert "task template 'nothing', which this profile does not define" in (
        checked.stdout + checked.stderr
    )


def test_an_unexpanded_template_is_never_planned_silently(registry: ProfileRegistry) -> None:
    from iri_gateway.errors import JobRejectedError

    with pytest.raises(JobRejectedError, match="not expanded"):
        make_plan(
            JobSpec.model_validate({"template": "x", "executable": "/bin/true"}),
            registry.get("local"),
        )


def test_two_facilities_shipping_one_name_is_refused(tmp_path: Any) -> None:
    from iri_gateway.errors import GatewayError
    from iri_gateway.planning.job_templates import facility_templates
    from iri_gateway.shipped import shipped_dir

    shipped = (shipped_dir("facility_profiles") / "local.yaml").read_text(encoding="utf-8")
    section = "templates:\n  shell:\n    kind: task\n    executable: /bin/sh\n"
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(shipped + section, encoding="utf-8")
    second.write_text(shipped.replace("id: local", "id: other") + section, encoding="utf-8")
    assert list(facility_templates(ProfileRegistry.from_paths([first]))) == ["shell"]
    with pytest.raises(
        GatewayError, match="shipped by the profiles of both 'local' and 'other'; rename one"
    ):
        facility_templates(ProfileRegistry.from_paths([first, second]))


def test_a_facility_template_shadows_a_users_of_the_same_name(tmp_path: Any) -> None:
    """A profile that later ships a name a user already has: jobs get the facility's, the
    user's is listed as shadowed, and writing it stays refused."""
    from iri_gateway.models.job_templates import TaskTemplate
    from iri_gateway.planning.job_templates import FacilityTemplate
    from iri_gateway.service.jobs.job_templates import (
        TemplateBook,
        TemplateReadOnlyError,
        TemplateStore,
    )
    from iri_gateway.service.operations.store import JobStore

    store = TemplateStore(JobStore(f"sqlite:///{tmp_path}/jobs.db"))
    store.put("alice", "shell", TaskTemplate(kind="task", executable="/bin/mine"))
    shipped = TaskTemplate(kind="task", executable="/bin/site")
    book = TemplateBook(store, {"shell": FacilityTemplate("site", shipped)})
    listed = [(t.name, t.source, t.shadowed) for t in book.listed("alice")]
    assert listed == [("shell", "facility", False), ("shell", "user", True)]
    assert book.expand("alice", JobSpec.model_validate({"template": "shell"})).spec.executable == (
        "/bin/site"
    )
    with pytest.raises(TemplateReadOnlyError):
        book.put("alice", "shell", TaskTemplate(kind="task"))


def test_a_cluster_whose_task_template_is_gone_names_the_role() -> None:
    templates = {name: t for name, t in TEMPLATES.items() if name != "worker"}
    with pytest.raises(InvalidJobSpecError) as caught:
        expanded({"template": "spark"}, templates)
    assert [(p.field, p.reason) for p in caught.value.problems] == [
        (
            "template",
            "role 'worker' of template 'spark' names task template 'worker', which "
            "does not exist (any more)",
        )
    ]


def test_a_cluster_template_takes_the_jobs_life_cycle_without_roles_listed() -> None:
    spec = expanded({"template": "spark", "cluster_lifecycle": "all_must_end"})
    assert [(r.name, r.count) for r in spec.roles or []] == [("master", 1), ("worker", 2)]
    assert spec.cluster_lifecycle == "all_must_end"
    problems = refusal({"template": "base", "cluster_lifecycle": "all_must_end"})
    assert [(field, "roles only" in reason) for field, reason, _ in problems] == [
        ("cluster_lifecycle", True)
    ]
