"""Shared fixtures: the shipped profiles, the test site profile, JobSpec and plan helpers."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from iri_gateway.errors import JobRejectedError, Problem
from iri_gateway.models.plan import ClusterView, Plan
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.planner import make_plan
from iri_gateway.profiles.loading import ProfileRegistry, builtin_profile
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.operations.store import JobRecord, JobStore
from tests.support.paths import TEST_PROFILE
from tests.support.serve import issue_token, running_serve

pytest_plugins = [
    "tests.databases",
    "tests.api.jwks",
    "tests.api.task_site",
    "tests.support.token_leaks",
]
"""Fixtures of other modules, shared by every test that names them: the two databases
(`database_url`, `postgres_url`), the JWKS server (`keys`, `jwks_url`) and the file-task site
(`site`); and the session's end check that no serve log holds a token the tests issued
(`token_leaks`). Plug-ins, not imports, so that no test module redefines an imported name."""


@pytest.fixture(autouse=True)
def close_the_engines_a_test_made(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every engine a test (or its function-scoped fixtures) made is closed after it, also
    where the test never ran its app's lifespan: FastAPI (0.165) caches its endpoints'
    callables in module-level caches, so an app and its engine may outlive the test, and with
    them the store's open database files, the task pool and the login-node connections;
    left open, a whole run's worth exhausts `select()`'s 1024 descriptors. Engines of wider
    fixtures were made before this one started, and are theirs to close."""
    made: list[Engine] = []
    construct = Engine.__init__

    def recording(self: Engine, *args: Any, **kwargs: Any) -> None:
        construct(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(Engine, "__init__", recording)
    yield
    for engine in made:
        engine.close()


@pytest.fixture(scope="session")
def registry() -> ProfileRegistry:
    """The shipped profiles plus the test site."""
    return ProfileRegistry.from_paths([*sorted(ProfileRegistry.builtin_files()), TEST_PROFILE])


def plan_for(registry: ProfileRegistry, resource: str, document: dict[str, Any]) -> Plan:
    """Validate `document` as a JobSpec and plan it on `resource`."""
    return make_plan(parse_jobspec(document), registry.get(resource), registry.known_facts)


def stored_plan(*, cluster_size: int | None = None) -> dict[str, Any]:
    """A plan as the store keeps it (its script apart), for records a test makes by hand: a
    real plan of a one-process job on the shipped `local` resource, made a cluster job of
    `cluster_size` members when that is given."""
    loaded = ProfileRegistry.from_files([builtin_profile("local")]).get("local")
    plan = make_plan(parse_jobspec({"executable": "/bin/true"}), loaded)
    if cluster_size is not None:
        names = [f"worker{index}" for index in range(1, cluster_size + 1)]
        plan = plan.model_copy(
            update={
                "cluster": ClusterView(
                    size=cluster_size, hosts=",".join(names), primary=names[0], roles=[]
                )
            }
        )
    return plan.model_dump(mode="json", exclude={"script"})


def recorded_job(store: JobStore, **extra: Any) -> JobRecord:
    """A job of alice's recorded by hand on `local` (a `stored_plan`, the script `true`);
    `extra`: more of `JobStore.create`'s arguments (a key, `submitting`, a claim)."""
    job: dict[str, Any] = {
        "owner": "alice",
        "resource_id": "local",
        "spec": {},
        "effective_spec": {},
        "plan": stored_plan(),
        "script": "true",
    }
    return store.create(**job | extra)


def problems_for(
    registry: ProfileRegistry, resource: str, document: dict[str, Any]
) -> list[Problem]:
    """The problems negotiation reports; fails the test when the job is accepted."""
    with pytest.raises(JobRejectedError) as caught:
        plan_for(registry, resource, document)
    return caught.value.problems


def site_with_templates(folder: Path, templates: dict[str, str], dirname: str = "tpl") -> Path:
    """A copy of the test site profile whose `testsite-gpu` uses a folder of site templates.

    `templates` maps relative template paths (e.g. `runtimes/podman.sh.j2`) to their text;
    an empty mapping names a folder that does not exist. Returns the profile file.
    """
    for relative, text in templates.items():
        path = folder / dirname / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    profile = folder / "site.yaml"
    profile.write_text(
        TEST_PROFILE.read_text().replace(
            "    name: Test GPU cluster\n",
            f"    name: Test GPU cluster\n    templates_dir: {dirname}\n",
        )
    )
    return profile


LAUNCH_LINE = "{{ [launcher, [rt.executable] + rt.options, [rt.image], rt.command] | shlines }}\n"


def fields(problems: list[Problem]) -> list[str]:
    return [problem.field for problem in problems]


# ---- a real gateway server ---------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    """A real `iri-gateway serve` on loopback (the `local` resource) and a token for alice."""

    url: str
    token: str
    data_dir: Path


UNHURRIED = {"IRI_GATEWAY_READ_RATE": "1000000", "IRI_GATEWAY_WRITE_RATE": "1000000"}
"""Rates no test client reaches, for servers that one token drives as fast as it can
(the suite's shared server, the conformance and fuzzing sandboxes): what they test is not
the rate limits, which tests/api/test_rate_limits.py tests with small ones."""


def token_works(token: str) -> Callable[[str], bool]:
    """Readiness of the suite's server: the `local` resource answers alice's token."""

    def ready(url: str) -> bool:
        try:
            answer = httpx.get(
                f"{url}/api/v2/compute/capabilities/local",
                headers={"Authorization": f"Bearer {token}"},
                timeout=2,
            )
        except httpx.TransportError:
            return False
        return answer.status_code == 200

    return ready


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("gateway-data")
    token = issue_token(data_dir, "alice", "proj1")
    with running_serve(
        data_dir, extra_env=UNHURRIED, log=data_dir / "server.log", ready=token_works(token)
    ) as served:
        yield Server(served.url, token, data_dir)


def refresh_until(
    engine: Engine,
    resource_id: str,
    job_id: str,
    done: Callable[[JobRecord], bool],
    *,
    timeout: float = 20,
    pause: float = 0.05,
) -> JobRecord:
    """Run the engine's status cycle for `resource_id` until `done` holds for the job."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        engine.refresh(resource_id)
        record = engine.store.get(job_id)
        assert record is not None
        if done(record):
            return record
        time.sleep(pause)
    raise AssertionError(f"job {job_id} still {engine.store.get(job_id)}")
