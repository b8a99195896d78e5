"""Shell safety through the REAL qsub: hostile jobs planned for the PBS test profile's `pbs`
resource, submitted by the gateway's own engine to the running OpenPBS 23.06.06
(scripts/pbs), run by its MOM, and checked after they ended: every hostile value arrived byte
for byte (argv, environment, directory, stdin; the job name, output paths, account and custom
attribute as qstat reports them) and no payload ran. No stand-in is involved.

Directive values are read by qsub, not by bash: a value the gateway writes must come back
from the server exactly, and one it refuses must be one the rules document (`pbs_refuses`,
the real qsub's behaviour behind each is in tests/integration/test_pbs_directives_real.py).
The examples are batched: each hypothesis example submits a few jobs at once and waits for
them together (a PBS job starts within a second or two here).
"""

from __future__ import annotations

import functools
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.plan import Plan
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.operations.store import JobRecord
from tests.shell_safety.cluster_harness import (
    HostileClusterJob,
    cluster_document,
    cluster_refusals,
    expected_members,
    hostile_cluster_jobs,
)
from tests.shell_safety.harness import (
    CANARY,
    CONTROLS,
    STDIN_TEXT,
    Combo,
    HostileJob,
    accepted_plan,
    canaries,
    check_syntax,
    document,
    env_names,
    expected_refusals,
    file_name,
    hostile,
    install_recorder,
    pbs_refuses,
    plan,
    read_lines,
    scratch,
)

JOBS_PER_EXAMPLE = 3
ATTRIBUTE = "software"  # a site resource of the test server, allowed by the profile
# What qsub takes as a job name, so that some names pass and are checked (hostile ones are
# mostly refused).
PBS_NAMES = st.from_regex(r"[A-Za-z0-9_+.-]{1,24}", fullmatch=True)
PRINTABLE = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=24)


@functools.cache
def pbs_registry(profile: Path) -> ProfileRegistry:
    return ProfileRegistry.from_files([profile])


@dataclass(frozen=True)
class PbsCombo(Combo):
    """The PBS test profile's `pbs` resource (local, as root), no container."""

    profile: Path = Path()

    @property
    def loaded(self) -> LoadedResource:
        return pbs_registry(self.profile).get(self.resource_id)


@dataclass
class PbsHostileJob:
    """A hostile job and the values only PBS directives carry: account, custom attribute."""

    job: HostileJob
    account: str | None
    attribute: str | None


@st.composite
def pbs_hostile_jobs(draw: Any) -> PbsHostileJob:
    """Hostile argv, environment, executable, directory and stdin names; a job name, account
    and custom attribute that are hostile or plain printable ASCII (',', '@', '=', quotes);
    output paths always given (the engine's default ones are relative)."""
    job = HostileJob(
        executable_name=draw(file_name()),
        arguments=draw(st.lists(st.one_of(st.just(""), hostile()), max_size=4)),
        environment=draw(st.dictionaries(env_names, st.one_of(st.just(""), hostile()), max_size=3)),
        directory_name=draw(file_name(exclude=CONTROLS)),
        name=draw(st.none() | PBS_NAMES | hostile(exclude=CONTROLS)),
        stdout_name=draw(st.one_of(PBS_NAMES, file_name(exclude=CONTROLS))),
        stderr_name=draw(st.one_of(PBS_NAMES, file_name(exclude=CONTROLS))),
        stdin_name=draw(st.none() | PBS_NAMES | file_name(exclude=CONTROLS)),
    )
    account = draw(st.none() | PRINTABLE | hostile(exclude=CONTROLS))
    attribute = draw(st.none() | PRINTABLE | hostile(exclude=CONTROLS))
    return PbsHostileJob(job, account, attribute)


@dataclass
class Submitted:
    """One job: its document (refused values taken out), plan, folder and gateway record."""

    doc: dict[str, Any]
    plan: Plan
    root: Path
    record: JobRecord


def pbs_document(hostile_job: PbsHostileJob, combo: PbsCombo, root: Path) -> dict[str, Any]:
    doc = document(hostile_job.job, combo, root)
    attributes: dict[str, Any] = {}
    if hostile_job.account is not None:
        attributes["account"] = hostile_job.account
    if hostile_job.attribute is not None:
        attributes["custom_attributes"] = {ATTRIBUTE: hostile_job.attribute}
    if attributes:
        doc["attributes"] = attributes
    return doc


def refusals(doc: dict[str, Any], combo: PbsCombo) -> set[str]:
    """The documented refusals: the harness's for the job's fields, `pbs_refuses` for the
    account and the custom attribute."""
    refused = expected_refusals(doc, combo)
    attributes = doc.get("attributes", {})
    values = {"attributes.account": attributes.get("account")}
    values |= {
        f"attributes.custom_attributes.{key}": value
        for key, value in attributes.get("custom_attributes", {}).items()
    }
    return refused | {
        key for key, value in values.items() if value is not None and pbs_refuses(key, value)
    }


def drop(doc: dict[str, Any], key: str) -> None:
    """Take the value at JSON path `key` out of `doc`."""
    *parents, last = key.split(".")
    holder = doc
    for parent in parents:
        holder = holder[parent]
    del holder[last]


def prepare(hostile_job: PbsHostileJob, combo: PbsCombo, root: Path) -> tuple[dict[str, Any], Plan]:
    """Plan the job, asserting exactly the documented refusals (then left out), and make its
    program (the recorder), directory and stdin."""
    root.mkdir(parents=True)
    doc = pbs_document(hostile_job, combo, root)
    refused = refusals(doc, combo)
    planned, fields = plan(doc, combo)
    if refused:
        assert planned is None and set(fields) == refused, (
            f"expected refusal of exactly {sorted(refused)}, got {fields or 'a plan'}"
        )
        for key in refused:
            drop(doc, key)
            if key in ("stdout_path", "stderr_path"):
                # Without one the engine writes a relative default, joined to the directory
                # in `#PBS -o`: refused in its turn where the directory holds what -o cannot.
                doc[key] = str(root / f"{key}-instead")
        planned, fields = plan(doc, combo)
    assert planned is not None, f"refused {fields}"
    check_syntax(planned.script)
    install_recorder(Path(doc["executable"]), root / "recorder.jsonl")
    Path(doc["directory"]).mkdir(parents=True, exist_ok=True)
    if "stdin_path" in doc:
        Path(doc["stdin_path"]).write_text(STDIN_TEXT)
    return doc, planned


def qstat_attributes(native_id: str) -> dict[str, Any]:
    shown = subprocess.run(
        ["qstat", "-x", "-f", "-F", "json", native_id], capture_output=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    # qstat prints a value that looks like a number as a JSON number (software=0 is `0`):
    # the number's own text is what was given.
    jobs: dict[str, Any] = json.loads(shown.stdout, parse_int=str, parse_float=str)["Jobs"]
    assert len(jobs) == 1, jobs
    attributes: dict[str, Any] = next(iter(jobs.values()))
    return attributes


def assert_arrived_exactly(job: Submitted) -> None:
    """The job ended well, its program ran once with exactly its strings, PBS holds exactly
    the directive values, and nothing else ran."""
    doc, record = job.doc, job.record
    where = f"{record}\n--- script ---\n{job.plan.script}"
    assert record.state.value == "completed" and record.exit_code == 0, where
    assert canaries(job.root) == [], f"a payload ran: {where}"
    recorded = read_lines(job.root / "recorder.jsonl")
    assert len(recorded) == 1, f"the program ran {len(recorded)} times: {where}"
    seen = recorded[0]
    assert seen["argv"] == doc["arguments"], where
    for name, value in doc["environment"].items():
        assert seen["env"].get(name) == value, f"environment {name!r}: {where}"
    assert seen["cwd"] == doc["directory"], where
    assert seen["stdin"] == (STDIN_TEXT if "stdin_path" in doc else ""), where

    assert record.native_id is not None
    attributes = qstat_attributes(record.native_id)
    if "name" in doc:
        assert attributes["Job_Name"] == doc["name"], where
    for key, attribute in (("stdout_path", "Output_Path"), ("stderr_path", "Error_Path")):
        if key in doc:
            assert attributes[attribute].split(":", 1)[1] == doc[key], where
            assert Path(doc[key]).is_file(), f"{key} not written: {where}"
    given_attributes = doc.get("attributes", {})
    if "account" in given_attributes:
        assert attributes["Account_Name"] == given_attributes["account"], where
    for key, value in given_attributes.get("custom_attributes", {}).items():
        assert attributes["Resource_List"][key] == value, where


def run_batch(jobs: list[PbsHostileJob], engine: Engine, combo: PbsCombo) -> None:
    from tests.integration.conftest import wait_all_final

    with scratch() as base:
        base.chmod(0o755)
        submitted: list[Submitted] = []
        for number, hostile_job in enumerate(jobs):
            root = base / f"job{number}"
            doc, planned = prepare(hostile_job, combo, root)
            record = engine.submit(owner="root", resource_id="pbs", spec=parse_jobspec(doc)).record
            assert record.native_id, record
            submitted.append(Submitted(doc, planned, root, record))
        ended = wait_all_final(engine, [job.record.id for job in submitted], timeout=180)
        for job in submitted:
            job.record = ended[job.record.id]
            assert_arrived_exactly(job)
        assert canaries(base) == []
    assert not Path(CANARY).exists() and not (Path.home() / CANARY).exists()


@pytest.fixture(scope="module")
def pbs_combo(tmp_path_factory: pytest.TempPathFactory) -> PbsCombo:
    from tests.integration.conftest import running_cluster, running_pbs, write_pbs_profile

    info = running_pbs(running_cluster())
    profile = write_pbs_profile(info, tmp_path_factory.mktemp("pbs-profile"))
    return PbsCombo("pbs", "none", profile)


@pytest.fixture(scope="module")
def engine(pbs_combo: PbsCombo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """One engine for every example; jobs it leaves unsettled are deleted (by their ids)."""
    from tests.integration.conftest import make_engine

    made = make_engine(pbs_combo.profile, tmp_path_factory.mktemp("pbs-engine"))
    yield made
    for record in made.store.unsettled():
        if record.native_id:
            subprocess.run(["qdel", record.native_id], capture_output=True, timeout=30)
    made.backends.close()


@settings(
    max_examples=4,
    deadline=None,
    # No shrinking: each step would submit real jobs (minutes); a failure shows its example.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(jobs=st.lists(pbs_hostile_jobs(), min_size=JOBS_PER_EXAMPLE, max_size=JOBS_PER_EXAMPLE))
def test_hostile_jobs_through_the_real_qsub_arrive_exactly(
    jobs: list[PbsHostileJob], engine: Engine, pbs_combo: PbsCombo
) -> None:
    run_batch(jobs, engine, pbs_combo)


def test_the_nastiest_strings_through_the_real_qsub(engine: Engine, pbs_combo: PbsCombo) -> None:
    """Spelled out: quotes and substitutions in argv, environment, file and folder names; a
    name, account and attribute at the edge of what qsub takes ('+', '.', '=', '@', ':', '$',
    ';' pass; the account's quote and the attribute's ',' are refused)."""
    nasty = HostileJob(
        executable_name="job's prog $(touch CANARY)",
        arguments=["it's $(whoami)", "`touch CANARY`", "", "a\nb", "\\", "-V", "#PBS -N x"],
        environment={"SHARED": "from the job; touch CANARY", "MULTI": "one\ntwo", "E": ""},
        directory_name="run dir #1 $(touch CANARY)",
        name="v1.2+fix-3",
        stdout_name="out,a=b$HOME@x;y%j",
        stderr_name="err-~{a}!",
        stdin_name="in-put",
    )
    run_batch(
        [
            PbsHostileJob(nasty, "proj=a@b:c;$x", "home:eagle+x=y"),
            PbsHostileJob(HostileJob(name="a"), "it's", "a,walltime=99:00:00"),
        ],
        engine,
        pbs_combo,
    )


# --- cluster jobs: every member's strings through the real qsub and mpiexec ------------------


def check_cluster_through_pbs(cluster: HostileClusterJob, engine: Engine, combo: PbsCombo) -> None:
    """A hostile cluster job (no container) on the real PBS: each member's program ran once,
    started by the real `mpiexec --hosts` on its chunk's host, with exactly its role's merge
    of the job's strings; nothing else ran."""
    from tests.integration.conftest import wait_all_final

    with scratch() as base:
        base.chmod(0o755)
        root = base / "cluster"
        root.mkdir()
        doc = cluster_document(cluster, combo, root)
        planned = accepted_plan(doc, cluster_refusals(doc, combo), combo)
        for output in ("stdout_path", "stderr_path"):
            doc.setdefault(output, str(root / f"{output}-instead"))  # see `prepare`
        for role in [doc, *doc["roles"]]:
            if "executable" in role:
                install_recorder(Path(role["executable"]), root / "recorder.jsonl")
        if "directory" in doc:  # not when refused (and so left out): the gateway makes one
            Path(doc["directory"]).mkdir(parents=True, exist_ok=True)
        if "stdin_path" in doc:
            Path(doc["stdin_path"]).write_text(STDIN_TEXT)
        record = engine.submit(owner="root", resource_id="pbs", spec=parse_jobspec(doc)).record
        record = wait_all_final(engine, [record.id], timeout=180)[record.id]
        where = f"{record}\n--- script ---\n{planned.script}"
        assert record.state.value == "completed" and record.exit_code == 0, where
        assert canaries(base) == [], f"a payload ran: {where}"
        seen: dict[tuple[str, str], dict[str, Any]] = {}
        for line in read_lines(root / "recorder.jsonl"):
            key = (line["env"].get("IRI_CLUSTER_ROLE"), line["env"].get("IRI_CLUSTER_ROLE_INDEX"))
            assert key not in seen, f"member {key} ran twice: {where}"
            seen[key] = line
        members = expected_members(doc, combo)
        assert sorted(seen) == sorted((m.role, str(m.index)) for m in members), where
        for number, member in enumerate(members):
            got = seen[(member.role, str(member.index))]
            mine = f"{member.name}: {where}"
            assert got["executable"] == member.executable, mine
            assert got["argv"] == member.arguments, mine
            for name, value in member.environment.items():
                assert got["env"].get(name) == value, f"environment {name!r} of {mine}"
            if "directory" in doc:
                assert got["cwd"] == doc["directory"], mine
            else:  # the job's own folder, named by its id, under the resource's job root
                assert Path(got["cwd"]).name == record.id, mine
            stdin = STDIN_TEXT if number == 0 and "stdin_path" in doc else ""
            assert got["stdin"] == stdin, mine
        states = {m["name"]: (m["state"], m["exit_code"]) for m in record.members}
        assert states == {m.name: ("completed", 0) for m in members}, where


@settings(
    max_examples=2,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(cluster=hostile_cluster_jobs())
def test_every_member_of_a_hostile_cluster_job_gets_its_strings_through_the_real_qsub(
    cluster: HostileClusterJob, engine: Engine, pbs_combo: PbsCombo
) -> None:
    check_cluster_through_pbs(cluster, engine, pbs_combo)
