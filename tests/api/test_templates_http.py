"""Job templates through a real `iri-gateway serve` over HTTP: users keep templates, launch
cluster jobs from them with counts inside each role's limits (the job runs, its members
bootstrapped), are refused outside them with the role and range named, never see or touch
another user's templates, and use the facility's (read-only) from the profile. Two writes of
one name at once leave one whole template, never a 500."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from iri_gateway.models.job_templates import TaskTemplate
from iri_gateway.service.jobs.job_templates import TemplateStore
from iri_gateway.shipped import shipped_dir
from tests.support.serve import RunningServe, clean_env, running_serve

SITE_TEMPLATES = """
templates:
  site-shell:
    kind: task
    description: Says the site's greeting
    executable: /bin/sh
    arguments: ["-c", "echo \\"$SITE_GREETING\\""]
    environment: {SITE_GREETING: hello from the site}
  site-pair:
    kind: cluster
    roles:
      - {name: node, task: site-shell, min: 1, max: 2}
"""

GREETER = {
    "kind": "task",
    "description": "Says who it is, once bootstrapped",
    "executable": "/bin/sh",
    "arguments": [
        "-c",
        'echo "$IRI_CLUSTER_ROLE$IRI_CLUSTER_ROLE_INDEX of $IRI_CLUSTER_SIZE '
        'ready=$READY greeting=$GREETING"',
    ],
    "environment": {"GREETING": "template"},
    "bootstrap": "READY=yes; export READY",
}
PAIR = {
    "kind": "cluster",
    "description": "one master, 1 to 3 workers",
    "roles": [
        {"name": "master", "task": "greeter"},
        {"name": "worker", "task": "greeter", "min": 1, "max": 3},
    ],
}


@dataclass(frozen=True)
class Site:
    serve: RunningServe
    alice: dict[str, str]
    bob: dict[str, str]
    jobs: Path

    @property
    def url(self) -> str:
        return self.serve.url + "/api/v2/compute"


def _token(data_dir: Path, user: str) -> str:
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "iri_gateway",
            "token",
            user,
            "--project",
            "proj1",
            "--data-dir",
            str(data_dir),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
        check=True,
    )
    return made.stdout.strip()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("templates-site")
    profiles = root / "profiles"
    profiles.mkdir()
    shipped = (shipped_dir("facility_profiles") / "local.yaml").read_text(encoding="utf-8")
    (profiles / "local.yaml").write_text(shipped + SITE_TEMPLATES, encoding="utf-8")
    data = root / "data"
    data.mkdir()
    headers = {
        user: {"Authorization": f"Bearer {_token(data, user)}", "X-IRI-Facility-Project": "proj1"}
        for user in ("alice", "bob")
    }
    env = {"IRI_GATEWAY_PROFILES": json.dumps([str(profiles)]), "IRI_GATEWAY_POLL_FAST": "0.2"}
    with running_serve(data, extra_env=env) as serve:
        yield Site(serve, headers["alice"], headers["bob"], tmp_path_factory.mktemp("jobs"))


def _finished(site: Site, job_id: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job: dict[str, Any] = httpx.get(
            f"{site.url}/status/local/{job_id}", headers=site.alice
        ).json()
        if job["status"]["state"] in ("completed", "failed", "canceled"):
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not finish: {job}")


def test_a_user_keeps_templates_and_launches_a_cluster_inside_the_limits(site: Site) -> None:
    put = httpx.put(f"{site.url}/templates/greeter", json=GREETER, headers=site.alice)
    assert put.status_code == 201, put.text
    assert put.json()["source"] == "user" and put.json()["template"]["kind"] == "task"
    again = httpx.put(f"{site.url}/templates/greeter", json=GREETER, headers=site.alice)
    assert again.status_code == 200, "a second write replaces"
    assert httpx.put(f"{site.url}/templates/pair", json=PAIR, headers=site.alice).status_code == 201
    listed = httpx.get(f"{site.url}/templates", headers=site.alice).json()
    assert [(t["name"], t["source"]) for t in listed] == [
        ("site-pair", "facility"),
        ("site-shell", "facility"),
        ("greeter", "user"),
        ("pair", "user"),
    ]

    job = {
        "template": "pair",
        "roles": [{"name": "worker", "count": 3}],
        "directory": str(site.jobs / "pair"),
        "stdout_path": "out.txt",
        "environment": {"GREETING": "job"},
    }
    (site.jobs / "pair").mkdir()
    plan = httpx.post(f"{site.url}/plan/local", json=job, headers=site.alice)
    assert plan.status_code == 200, plan.text
    assert plan.json()["template"] == "pair"
    assert [(r["name"], r["count"]) for r in plan.json()["cluster"]["roles"]] == [
        ("master", 1),
        ("worker", 3),
    ]

    launched = httpx.post(f"{site.url}/job/local", json=job, headers=site.alice)
    assert launched.status_code == 200, launched.text
    done = _finished(site, launched.json()["id"])
    assert done["status"]["state"] == "completed", done
    out = (site.jobs / "pair" / "out.txt").read_text()
    assert out == "master1 of 4 ready=yes greeting=job\n", "bootstrapped; the job's env wins"
    cluster_dir = next((site.jobs / "pair").glob(".iri-cluster-*"))
    assert (cluster_dir / "worker3.out").read_text() == "worker3 of 4 ready=yes greeting=job\n"


def test_a_count_out_of_range_is_a_422_naming_the_role_and_range(site: Site) -> None:
    httpx.put(f"{site.url}/templates/greeter", json=GREETER, headers=site.alice)
    httpx.put(f"{site.url}/templates/pair", json=PAIR, headers=site.alice)
    for path in ("plan/local", "job/local"):
        answer = httpx.post(
            f"{site.url}/{path}",
            headers=site.alice,
            json={"template": "pair", "roles": [{"name": "worker", "count": 4}]},
        )
        assert answer.status_code == 422, answer.text
        assert answer.json()["invalid_params"] == [
            {
                "name": "roles[0].count",
                "reason": "role 'worker' of template 'pair' takes 1 to 3 members; 4 asked for "
                "(offered: 1..3)",
            }
        ]
    placed = httpx.post(
        f"{site.url}/placement",
        headers=site.alice,
        json={"template": "pair", "roles": [{"name": "worker", "count": 2}]},
    )
    assert placed.status_code == 200, placed.text
    assert placed.json()[0]["resource"] == "local" and placed.json()[0]["runnable"], placed.text
    assert (
        httpx.post(
            f"{site.url}/placement",
            headers=site.alice,
            json={"template": "pair", "roles": [{"name": "worker", "count": 9}]},
        ).status_code
        == 422
    )
    unknown = httpx.post(f"{site.url}/plan/local", headers=site.alice, json={"template": "pear"})
    assert unknown.status_code == 422
    assert unknown.json()["invalid_params"] == [
        {"name": "template", "reason": "no template named 'pear' (offered: closest: pair)"}
    ]


def test_another_user_can_neither_see_use_nor_delete_them(site: Site) -> None:
    assert httpx.put(
        f"{site.url}/templates/greeter", json=GREETER, headers=site.alice
    ).status_code in (200, 201)
    names = [t["name"] for t in httpx.get(f"{site.url}/templates", headers=site.bob).json()]
    assert names == ["site-pair", "site-shell"]
    assert httpx.get(f"{site.url}/templates/greeter", headers=site.bob).status_code == 404
    used = httpx.post(f"{site.url}/plan/local", headers=site.bob, json={"template": "greeter"})
    assert used.status_code == 422 and "no template named 'greeter'" in used.text
    assert httpx.delete(f"{site.url}/templates/greeter", headers=site.bob).status_code == 404
    mine = dict(GREETER, description="bob's own")
    assert (
        httpx.put(f"{site.url}/templates/greeter", json=mine, headers=site.bob).status_code == 201
    ), "bob's names are his own"
    alice_s = httpx.get(f"{site.url}/templates/greeter", headers=site.alice).json()
    assert alice_s["template"]["description"] == GREETER["description"]
    assert httpx.delete(f"{site.url}/templates/greeter", headers=site.bob).status_code == 204
    assert httpx.get(f"{site.url}/templates/greeter", headers=site.alice).status_code == 200
    assert httpx.get(f"{site.url}/templates", headers={}).status_code == 401


def test_facility_templates_are_shared_and_read_only(site: Site) -> None:
    shipped = httpx.get(f"{site.url}/templates/site-shell", headers=site.bob)
    assert shipped.status_code == 200
    assert (shipped.json()["source"], shipped.json()["facility"]) == ("facility", "local")
    refused = httpx.put(f"{site.url}/templates/site-shell", json=GREETER, headers=site.bob)
    assert refused.status_code == 409 and "shipped by facility 'local'" in refused.text
    assert httpx.delete(f"{site.url}/templates/site-shell", headers=site.bob).status_code == 409
    directory = site.jobs / "site"
    directory.mkdir()
    launched = httpx.post(
        f"{site.url}/job/local",
        headers=site.alice,
        json={"template": "site-shell", "directory": str(directory), "stdout_path": "out.txt"},
    )
    assert launched.status_code == 200, launched.text
    assert _finished(site, launched.json()["id"])["status"]["state"] == "completed"
    assert (directory / "out.txt").read_text() == "hello from the site\n"
    over = httpx.post(
        f"{site.url}/plan/local",
        headers=site.bob,
        json={"template": "site-pair", "roles": [{"name": "node", "count": 3}]},
    )
    assert over.status_code == 422 and "takes 1 to 2 members" in over.text


def test_bad_template_bodies_are_422_with_the_field(site: Site) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"kind": "task", "bootstrap": "x" * 40000}, "bootstrap"),
        ({"kind": "task", "environment": {f"V{i}": "1" for i in range(1025)}}, "environment"),
        ({"kind": "cluster", "roles": [{"name": "worker", "task": "nothing"}]}, "roles[0].task"),
        ({"kind": "task", "surprise": 1}, "surprise"),
        (
            {"kind": "cluster", "roles": [{"name": "w", "task": "greeter", "min": 3, "max": 2}]},
            "roles",
        ),
    ]
    for body, field in cases:
        answer = httpx.put(f"{site.url}/templates/bad", json=body, headers=site.alice)
        assert answer.status_code == 422, (body, answer.text)
        assert any(field in p["name"] for p in answer.json()["invalid_params"]), answer.text
    assert (
        httpx.put(f"{site.url}/templates/..bad", json=GREETER, headers=site.alice).status_code
        == 422
    )
    assert httpx.get(f"{site.url}/templates/bad", headers=site.alice).status_code == 404


def test_two_puts_of_one_name_at_once_leave_one_whole_template(site: Site) -> None:
    bodies = [
        dict(
            GREETER,
            description=f"writer {n}",
            environment={"N": str(n)} | {f"V{i}": str(n) for i in range(50)},
        )
        for n in range(2)
    ]
    statuses: list[int] = []

    def write(body: dict[str, Any]) -> None:
        for _ in range(10):
            statuses.append(
                httpx.put(
                    f"{site.url}/templates/raced", json=body, headers=site.alice, timeout=30
                ).status_code
            )

    threads = [threading.Thread(target=write, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(set(statuses)) in ([200], [200, 201]) and statuses.count(201) == 1
    kept = httpx.get(f"{site.url}/templates/raced", headers=site.alice).json()["template"]
    number = kept["environment"]["N"]
    assert kept["description"] == f"writer {number}"
    assert set(kept["environment"].values()) == {number}, "one writer's body, whole"


def test_the_store_decides_a_race_on_both_databases(database_url: str) -> None:
    """Two writers of one new name at once on SQLite and PostgreSQL: one insert wins, the
    other becomes an update; both bodies whole, the last stands."""
    from iri_gateway.service.operations.store import JobStore

    store = TemplateStore(JobStore(database_url))
    barrier = threading.Barrier(8)
    created: list[bool] = []

    def write(n: int) -> None:
        barrier.wait()
        created.append(
            store.put(
                "alice",
                "raced",
                TaskTemplate(kind="task", description=f"writer {n}", environment={"N": str(n)}),
            )
        )

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(created) == [False] * 7 + [True]
    found = store.get("alice", "raced")
    assert found is not None and isinstance(found[0], TaskTemplate)
    assert found[0].description == f"writer {found[0].environment['N']}"
    assert store.names("alice") == ["raced"] and store.names("bob") == []


def _cli(
    site: Site, *args: str, user: str = "alice", stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    token = (site.alice if user == "alice" else site.bob)["Authorization"].split()[1]
    return subprocess.run(
        [sys.executable, "-m", "iri_gateway", "template", *args, "--server", site.serve.url],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean_env(), "IRI_GATEWAY_TOKEN": token, "COLUMNS": "200"},
    )


def test_the_cli_keeps_templates(site: Site, tmp_path: Path) -> None:
    task = tmp_path / "solver.yaml"
    task.write_text(
        "kind: task\ndescription: the solver\nimage: docker.io/lab/solver:1\n"
        "executable: /opt/solver\nbootstrap: |\n  echo warming up\n",
        encoding="utf-8",
    )
    saved = _cli(site, "put", "solver", str(task))
    assert (saved.returncode, saved.stdout) == (0, "template solver (task) saved\n"), saved.stderr
    cluster = json.dumps(
        {"kind": "cluster", "roles": [{"name": "worker", "task": "solver", "min": 2, "max": 16}]}
    )
    assert _cli(site, "put", "solvers", "-", stdin=cluster).returncode == 0
    listed = _cli(site, "list")
    assert listed.returncode == 0, listed.stderr
    rows = {
        line.split()[1]: line
        for line in listed.stdout.splitlines()
        if "│" in line and line.split()[1] in ("solver", "solvers", "site-pair")
    }
    assert "worker 2..16 (solver)" in rows["solvers"] and "user" in rows["solvers"]
    assert "facility local" in rows["site-pair"]
    shown = json.loads(_cli(site, "show", "solvers").stdout)
    assert shown["template"]["roles"][0]["max"] == 16
    as_json = json.loads(_cli(site, "list", "--json").stdout)
    assert "solver" in [t["name"] for t in as_json]
    bad = _cli(
        site,
        "put",
        "broken",
        "-",
        stdin='{"kind": "cluster", "roles": [{"name": "worker", "task": "solvr"}]}',
    )
    assert bad.returncode == 2
    assert "roles[0].task" in bad.stderr and "closest: solver" in bad.stderr
    assert _cli(site, "show", "solvers", user="bob").returncode == 1, "not bob's"
    assert _cli(site, "delete", "solvers", user="bob").returncode == 1
    deleted = _cli(site, "delete", "solvers")
    assert (deleted.returncode, deleted.stdout) == (0, "template solvers deleted\n")
    gone = _cli(site, "show", "solvers")
    assert gone.returncode == 1 and "no template 'solvers'" in gone.stderr


def test_the_async_sdk_keeps_templates(site: Site) -> None:
    import asyncio

    from iri_gateway.client import AsyncGatewayClient, Conflict, NotFound

    token = site.alice["Authorization"].split()[1]

    async def scenario() -> None:
        async with AsyncGatewayClient(site.serve.url, token) as client:
            stored = await client.put_template(
                "async-one",
                TaskTemplate(kind="task", executable="/bin/true", description="from the async SDK"),
            )
            assert (stored.name, stored.source) == ("async-one", "user")
            assert (await client.template("async-one")).template.description == (
                "from the async SDK"
            )
            assert "async-one" in [t.name for t in await client.templates()]
            with pytest.raises(Conflict):
                await client.delete_template("site-shell")
            await client.delete_template("async-one")
            with pytest.raises(NotFound, match="no template 'async-one'"):
                await client.template("async-one")

    asyncio.run(scenario())
