"""The shell-safety harness for cluster jobs (`roles`): every member gets exactly its role's
strings, launched on its own host.

Cluster jobs are run the same way as single jobs (harness.py) on every pair whose runtime can
bind the members' hosts file: hostile strings also go into every role field (executable,
arguments, environment, image, mounts, workdir, extra options), and every member must receive
exactly its role's merge of them, launched on its own host (stand-ins `scontrol` and
`scancel` for Slurm, a `$PBS_NODEFILE` written as PBS writes it).
"""

from __future__ import annotations

import socket
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from iri_gateway.models.plan import Plan
from tests.shell_safety.harness import (
    BASH,
    COMBOS,
    CONTROLS,
    OCI_IMAGES,
    QUALIFIED,
    STDIN_TEXT,
    Combo,
    HostileJob,
    accepted_plan,
    break_one_directive,
    canaries,
    check_syntax,
    document,
    env_names,
    expected_refusals,
    file_name,
    hostile,
    install_recorder,
    mount_safe,
    mount_source,
    read_lines,
    scratch,
    site_binds,
)
from tests.shell_safety.slurm_directives import sbatch_component_options
from tests.support.paths import STANDINS

# ---------------------------------------------------------------------------------------------
# Cluster jobs: hostile strings in role fields, and the job's fields every role inherits
# ---------------------------------------------------------------------------------------------
#
# A job with `roles` runs one member per role member, each started on its host by the
# scheduler's launcher (srun --het-group/--nodelist, mpiexec --hosts, or directly), found by
# name through a hosts file bound at /etc/hosts. The script runs under real bash with the
# stand-ins, plus `scontrol` and `scancel` for Slurm; `getent`, `sed` and `awk` are real. What
# sbatch or PBS would give the job (het-group node lists, $PBS_NODEFILE) is derived here from
# the script's own directives. Every program record carries its process id: a launcher, the
# runtime it starts and the member's program are one process (each `exec`s the next), which
# ties every member's launch to what it ran.

ROLE_NAMES = ("master", "worker", "param-server")
CLUSTER_COMBOS = tuple(combo for combo in COMBOS if combo.runtime != "shifter")  # no /etc/hosts
SLURM_JOB_ID = "4242"
PBS_JOB_ID = "4242.pbs-standin"


@dataclass
class HostileRole:
    """The user strings of one role; every field left None (or empty) is the job's."""

    name: str
    count: int = 1
    per_node: int = 1
    executable_name: str | None = None
    arguments: list[str] | None = None
    environment: dict[str, str] = field(default_factory=dict)
    sif_name: str | None = None  # the role's image where the runtime takes files
    oci: tuple[str, str] | None = None  # the role's image where it takes OCI names
    mounts: list[tuple[str, str, bool]] = field(default_factory=list)
    workdir: str | None = None
    extra_options: bool = False
    tmpfs: str = "role-scratch"


@dataclass
class HostileClusterJob:
    """A job of roles; `job` holds the top-level fields, the defaults of every role."""

    job: HostileJob
    roles: list[HostileRole]


def mount_lists(max_size: int) -> Any:
    """Mounts (source tail, target, read-only), no two with the same target."""
    return st.lists(
        st.tuples(mount_safe(), mount_safe(), st.booleans()),
        max_size=max_size,
        unique_by=lambda mount: mount[1],
    )


@st.composite
def hostile_roles(draw: Any, name: str) -> HostileRole:
    return HostileRole(
        name=name,
        count=draw(st.integers(1, 2)),
        per_node=draw(st.integers(1, 2)),
        executable_name=draw(st.none() | file_name()),
        arguments=draw(st.none() | st.lists(st.one_of(st.just(""), hostile()), max_size=3)),
        environment=draw(st.dictionaries(env_names, st.one_of(st.just(""), hostile()), max_size=3)),
        sif_name=draw(st.none() | hostile()),
        oci=draw(st.none() | st.sampled_from(OCI_IMAGES)),
        mounts=draw(mount_lists(1)),
        workdir=draw(st.none() | hostile().map(lambda text: "/" + text)),
        extra_options=draw(st.booleans()),
        tmpfs=draw(hostile(exclude=" ,")),
    )


@st.composite
def hostile_cluster_jobs(draw: Any) -> HostileClusterJob:
    """One or two roles of one or two members, over a job whose own strings are hostile too
    (in a third of the jobs with one directive value broken, which must be refused)."""
    job = HostileJob(
        executable_name=draw(file_name()),
        arguments=draw(st.lists(st.one_of(st.just(""), hostile()), max_size=3)),
        environment=draw(st.dictionaries(env_names, st.one_of(st.just(""), hostile()), max_size=3)),
        directory_name=draw(file_name(exclude=CONTROLS)),
        name=draw(st.none() | hostile(exclude=CONTROLS)),
        stdout_name=draw(st.none() | file_name(exclude=CONTROLS)),
        stderr_name=draw(st.none() | file_name(exclude=CONTROLS)),
        stdin_name=draw(st.none() | file_name(exclude=CONTROLS)),
        workdir=draw(st.none() | hostile().map(lambda text: "/" + text)),
        mounts=draw(mount_lists(2)),
        sif_name=draw(hostile()),
        oci=draw(st.sampled_from(OCI_IMAGES)),
        extra_options=draw(st.booleans()),
        tmpfs=draw(hostile(exclude=" ,")),
    )
    break_one_directive(draw, job)
    names = draw(st.lists(st.sampled_from(ROLE_NAMES), min_size=1, max_size=2, unique=True))
    return HostileClusterJob(job, [draw(hostile_roles(name)) for name in names])


def role_extra_options(role: HostileRole, combo: Combo) -> list[str]:
    """Options a role adds after the job's, on the pair's allow-list (podman's carries
    hostile text)."""
    return {
        "apptainer": ["--no-home"],
        "podman-hpc": ["--scratch"],
        "podman": [f"--tmpfs=/{role.tmpfs}"],
    }[combo.runtime]


def cluster_document(cluster: HostileClusterJob, combo: Combo, root: Path) -> dict[str, Any]:
    """The JobSpec of a cluster job on `combo`: the job's fields, then a role each."""
    doc = document(cluster.job, combo, root)
    doc.pop("resources", None)  # every member is one process on one node
    doc.pop("launcher", None)
    roles: list[dict[str, Any]] = []
    for role in cluster.roles:
        entry: dict[str, Any] = {
            "name": role.name,
            "count": role.count,
            "environment": dict(role.environment),
        }
        if role.per_node != 1 and combo.scheduler != "local":
            entry["resources"] = {"processes_per_node": role.per_node}
        if role.executable_name is not None:
            entry["executable"] = str(root / f"exe-{role.name}-{role.executable_name}")
        if role.arguments is not None:
            entry["arguments"] = list(role.arguments)
        if combo.runtime != "none":
            container = role_container(role, combo)
            if container:
                entry["container"] = container
        roles.append(entry)
    doc["roles"] = roles
    # Every member must run to its own end here (each is checked); under the default
    # primary_ends_all a quick primary would stop the others first.
    doc["cluster_lifecycle"] = "all_must_end"
    return doc


def role_container(role: HostileRole, combo: Combo) -> dict[str, Any]:
    """The role's own container fields (an empty mapping: all the job's)."""
    container: dict[str, Any] = {}
    if combo.takes_file_images and role.sif_name is not None:
        container["image"] = f"/images/{role.sif_name}.sif"
    elif not combo.takes_file_images and role.oci is not None:
        container["image"] = role.oci[0]
    if role.mounts:
        container["volume_mounts"] = [
            {"source": mount_source(tail, combo), "target": "/" + target, "read_only": ro}
            for tail, target, ro in role.mounts
        ]
    if role.workdir is not None:
        container["workdir"] = role.workdir
    if role.extra_options:
        container["extra_options"] = {combo.runtime: role_extra_options(role, combo)}
    return container


def cluster_refusals(doc: dict[str, Any], combo: Combo) -> set[str]:
    """The documented refusals of the job's own fields (see `expected_refusals`); with a
    container, a job directory holding ':' or ',' too: every member binds the hosts file
    from the cluster folder inside it, and no runtime's bind syntax can carry those."""
    plain = {key: value for key, value in doc.items() if key not in ("container", "roles")}
    refused = expected_refusals(plain, combo)
    if combo.runtime != "none" and any(c in doc.get("directory", "") for c in ":,"):
        refused.add("directory")
    return refused


@dataclass
class ExpectedMember:
    """What one member must run: by the documented merge of the job's and its role's fields."""

    name: str
    role: str
    index: int
    role_number: int
    per_node: int
    executable: str
    arguments: list[str]
    environment: dict[str, str]
    container: dict[str, Any] | None

    @property
    def slot(self) -> int:
        return self.index - 1


def merged_container(
    job: dict[str, Any] | None, role: dict[str, Any] | None
) -> dict[str, Any] | None:
    """image < job < role: the role's image and workdir win; a role mount replaces the job's
    mount on the same target, others are added; the role's extra options follow the job's."""
    if job is None:
        return None
    role = role or {}
    mounts = {mount["target"]: mount for mount in job.get("volume_mounts", [])}
    mounts.update({mount["target"]: mount for mount in role.get("volume_mounts", [])})
    options = {runtime: list(listed) for runtime, listed in job.get("extra_options", {}).items()}
    for runtime, listed in role.get("extra_options", {}).items():
        options[runtime] = options.get(runtime, []) + list(listed)
    merged = {**job, "volume_mounts": list(mounts.values()), "extra_options": options}
    merged.update({key: role[key] for key in ("image", "workdir") if key in role})
    return merged


def expected_members(doc: dict[str, Any], combo: Combo) -> list[ExpectedMember]:
    """Every member in order (master1, worker1, worker2, ...), with what it must receive."""
    slots = [
        (number, role, index)
        for number, role in enumerate(doc["roles"])
        for index in range(1, role["count"] + 1)
    ]
    names = [f"{role['name']}{index}" for _, role, index in slots]
    cluster_env = {"IRI_CLUSTER_SIZE": str(len(names)), "IRI_CLUSTER_HOSTS": ",".join(names)}
    members = []
    for (number, role, index), name in zip(slots, names, strict=True):
        if "arguments" in role:
            arguments = role["arguments"]
        else:
            arguments = [] if "executable" in role else doc["arguments"]
        per_node = role.get("resources", {}).get("processes_per_node", 1)
        members.append(
            ExpectedMember(
                name=name,
                role=role["name"],
                index=index,
                role_number=number,
                per_node=role["count"] if combo.scheduler == "local" else per_node,
                executable=role.get("executable", doc["executable"]),
                arguments=arguments,
                environment={
                    **doc["environment"],
                    **role["environment"],
                    **cluster_env,
                    "IRI_CLUSTER_ROLE": role["name"],
                    "IRI_CLUSTER_ROLE_INDEX": str(index),
                },
                container=merged_container(doc.get("container"), role.get("container")),
            )
        )
    return members


def slurm_allocation(script: str, roles: int) -> tuple[list[list[str]], dict[str, str]]:
    """The nodes sbatch gives each het-job component (its --nodes) and the variables it sets:
    SLURM_JOB_NODELIST_HET_GROUP_<n> per component of a het job, SLURM_JOB_NODELIST."""
    components = sbatch_component_options(script)
    assert len(components) == roles, f"{len(components)} het-job components for {roles} roles"
    nodes: list[list[str]] = []
    lists: list[str] = []
    env = {"SLURM_JOB_ID": SLURM_JOB_ID, "SLURM_JOBID": SLURM_JOB_ID}
    for number, options in enumerate(components):
        (count,) = options["nodes"]
        nodes.append([f"nid{number}{k:03d}" for k in range(int(count))])
        lists.append(f"nid{number}[000-{int(count) - 1:03d}]")
        if roles > 1:
            env[f"SLURM_JOB_NODELIST_HET_GROUP_{number}"] = lists[-1]
    env["SLURM_JOB_NODELIST"] = ",".join(lists)
    return nodes, env


def pbs_allocation(script: str, roles: int) -> tuple[list[list[str]], str]:
    """The hosts PBS gives each select chunk (place=scatter: a host of its own each) and the
    $PBS_NODEFILE it writes: every host once per `mpiprocs` of its chunk, in select order.
    The hosts are loopback addresses, so that the real `getent` resolves each to itself."""
    (line,) = [text for text in script.split("\n") if text.startswith("#PBS -l select=")]
    chunks = line.removeprefix("#PBS -l select=").split("+")
    assert len(chunks) == roles, f"{len(chunks)} select chunks for {roles} roles: {line}"
    nodes: list[list[str]] = []
    nodefile: list[str] = []
    for chunk in chunks:
        count, *resources = chunk.split(":")
        mpiprocs = int(dict(item.split("=", 1) for item in resources).get("mpiprocs", "1"))
        hosts = [f"127.0.0.{sum(map(len, nodes)) + k + 1}" for k in range(int(count))]
        nodefile += [host for host in hosts for _ in range(mpiprocs)]
        nodes.append(hosts)
    return nodes, "".join(f"{host}\n" for host in nodefile)


@dataclass
class ClusterRun:
    """One cluster job on one pair: the script, the allocation, what every program saw."""

    combo: Combo
    doc: dict[str, Any]
    plan: Plan
    root: Path
    script_path: Path
    cwd: Path
    env: dict[str, str]
    nodes: list[list[str]]  # per role: the hosts the scheduler gave it
    addresses: list[list[str]]  # the same hosts' addresses
    job_id: str
    process: subprocess.CompletedProcess[str] | None = None

    @property
    def recorded(self) -> list[dict[str, Any]]:
        return read_lines(self.root / "recorder.jsonl")

    @property
    def standins(self) -> list[dict[str, Any]]:
        return read_lines(self.root / "standins.jsonl")


def prepare_cluster(cluster: HostileClusterJob, combo: Combo, base: Path) -> ClusterRun:
    """Plan the cluster job on `combo` (asserting documented refusals) and set up its run."""
    root = base / combo.slug
    root.mkdir(parents=True)
    doc = cluster_document(cluster, combo, root)
    refused = cluster_refusals(doc, combo)
    planned = accepted_plan(doc, refused, combo)
    script = planned.script
    check_syntax(script)

    for role in [doc, *doc["roles"]]:
        if "executable" in role:
            install_recorder(Path(role["executable"]), root / "recorder.jsonl")
    if "directory" in doc:
        Path(doc["directory"]).mkdir(parents=True, exist_ok=True)
    if "stdin_path" in doc:
        Path(doc["stdin_path"]).write_text(STDIN_TEXT)
    (root / "home").mkdir()
    env = {
        "PATH": f"{STANDINS}:/usr/bin:/bin",
        "HOME": str(root / "home"),
        "LANG": "C.UTF-8",
        "IRI_STANDIN_LOG": str(root / "standins.jsonl"),
    }
    roles = len(doc["roles"])
    cwd = root
    if combo.scheduler == "slurm":
        first = sbatch_component_options(script)[0]
        if "chdir" in first:
            cwd = Path(first["chdir"][-1])  # sbatch --chdir, before the script
        nodes, variables = slurm_allocation(script, roles)
        env.update(variables)
        addresses = [["127.0.0.1"] * len(hosts) for hosts in nodes]  # scontrol's NodeAddr
        job_id = SLURM_JOB_ID
    elif combo.scheduler == "pbs":
        nodes, nodefile = pbs_allocation(script, roles)
        (root / "nodefile").write_text(nodefile)
        env.update(
            PBS_NODEFILE=str(root / "nodefile"), PBS_O_WORKDIR=str(root), PBS_JOBID=PBS_JOB_ID
        )
        addresses = nodes
        job_id = PBS_JOB_ID
    else:
        nodes = [[socket.gethostname()]] * roles  # bash's $HOSTNAME
        addresses = [["127.0.0.1"]] * roles
        env["IRI_LOCAL_JOB_ID"] = SLURM_JOB_ID
        job_id = SLURM_JOB_ID
    path = root / "job.sh"
    path.write_text(script, encoding="utf-8")
    return ClusterRun(combo, doc, planned, root, path, cwd, env, nodes, addresses, job_id)


def run_cluster(run: ClusterRun) -> ClusterRun:
    run.process = subprocess.run(
        [BASH, str(run.script_path)],
        cwd=run.cwd,
        env=run.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        encoding="utf-8",
        errors="replace",
        timeout=60,
    )
    return run


def options_of(record: dict[str, Any]) -> dict[str, list[str | None]]:
    """A launcher's parsed options by name."""
    options: dict[str, list[str | None]] = {}
    for name, value in record["launch"]["options"]:
        options.setdefault(name, []).append(value)
    return options


def assert_cluster_ran_exactly(run: ClusterRun) -> None:
    """Every member ran once, on its host, with exactly its role's strings; nothing else ran."""
    combo, doc, process = run.combo, run.doc, run.process
    assert process is not None
    where = f"{combo}\n--- script ---\n{run.plan.script}\n--- stderr ---\n{process.stderr}"
    assert process.returncode == 0, f"exit {process.returncode}: {where}"
    assert canaries(run.root) == [], f"a payload ran: {where}"
    members = expected_members(doc, combo)
    pwd = doc.get("directory", str(run.root))
    cluster_dir = f"{pwd}/.iri-cluster-{run.job_id}"

    # Each member's program ran exactly once (told apart by the role and index it was given).
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for record in run.recorded:
        key = (record["env"].get("IRI_CLUSTER_ROLE"), record["env"].get("IRI_CLUSTER_ROLE_INDEX"))
        assert key not in seen, f"member {key} ran twice: {where}"
        seen[key] = record
    assert sorted(seen) == sorted((m.role, str(m.index)) for m in members), where

    # Only the expected programs were called: per member a launcher and a runtime; scontrol
    # once per role (its nodes) and once per member (its address); modules; no scancel.
    expected: Counter[str] = Counter()
    if combo.scheduler != "local":
        expected[combo.launcher_program] = len(members)
    if combo.program is not None:
        expected[combo.program] = len(members)
    if combo.scheduler == "slurm":
        expected["scontrol"] = len(doc["roles"]) + len(members)
    modules = sum(1 for line in run.plan.script.split("\n") if line.split(" ")[0] == "module")
    if modules:
        expected["module"] = modules
    assert Counter(r["program"] for r in run.standins) == expected, where
    # A member's launcher and runtime records carry its program's process id (they `exec`).
    chained = {p for p in (combo.launcher_program, combo.program) if p}
    by_pid: dict[int, dict[str, dict[str, Any]]] = {}
    for record in run.standins:
        if record["program"] in chained:
            assert record["program"] not in by_pid.get(record["pid"], {}), where
            by_pid.setdefault(record["pid"], {})[record["program"]] = record

    hosts: list[str] = []
    for number, member in enumerate(members):
        mine = f"{member.name}: {where}"
        got = seen[(member.role, str(member.index))]
        assert got["executable"] == member.executable, mine
        assert got["argv"] == member.arguments, mine
        for name, value in member.environment.items():
            assert got["env"].get(name) == value, f"environment {name!r} of {mine}"
        assert got["cwd"] == pwd, mine
        assert got["stdin"] == (STDIN_TEXT if number == 0 and "stdin_path" in doc else ""), mine
        host = run.nodes[member.role_number][member.slot // member.per_node]
        hosts.append(host)
        chain = by_pid.get(got["pid"], {})
        assert set(chain) == chained, mine
        command = [member.executable, *member.arguments]
        if combo.scheduler == "slurm":
            launch = options_of(chain["srun"])
            assert launch.get("het-group") == (
                [str(member.role_number)] if len(doc["roles"]) > 1 else None
            ), mine
            assert launch["nodelist"] == [host], mine
            assert (launch["nodes"], launch["ntasks"]) == (["1"], ["1"]), mine
        elif combo.scheduler == "pbs":
            launch = options_of(chain["mpiexec"])
            assert (launch["hosts"], launch["np"]) == ([host], ["1"]), mine
        for record in chain.values():
            if "launch" in record and combo.program is None:
                assert record["launch"]["command"] == command, mine
        if combo.program is None:
            continue
        container, merged = chain[combo.program]["container"], member.container
        assert merged is not None
        given = QUALIFIED.get(merged["image"], merged["image"])
        if combo.runtime == "apptainer" and not combo.takes_file_images:
            given = f"docker://{given}"  # an OCI-mode site's: OCI names as docker:// URIs
        assert container["image"] == given, mine
        assert container["command"] == command, mine
        assert container["workdir"] == merged.get("workdir", doc.get("directory")), mine
        binds = [
            f"{m['source']}:{m['target']}:{'ro' if m['read_only'] else 'rw'}"
            for m in merged["volume_mounts"]
        ]
        if combo.runtime.startswith("podman") and "workdir" not in merged and "directory" in doc:
            binds.append(f"{doc['directory']}:{doc['directory']}:rw")
        assert container["mounts"] == [
            *site_binds(HostileJob(), combo),
            f"{cluster_dir}/hosts:/etc/hosts:ro",
            *binds,
        ], mine
        # SRC:DST[:OPTIONS] is how each runtime reads a bind: a ':' more moves the mount.
        assert all(len(mount.split(":")) <= 3 for mount in container["mounts"]), mine
        for name, value in member.environment.items():
            assert container["env"].get(name) == value, f"container env {name!r} of {mine}"
        for option in merged["extra_options"].get(combo.runtime, []):
            assert option in chain[combo.program]["argv"], f"extra option {option!r} of {mine}"

    # The scheduler's nodes were asked for and found; the members' names lead to their hosts.
    for role, allocated in zip(doc["roles"], run.nodes, strict=True):
        per_node = role.get("resources", {}).get("processes_per_node", 1)
        if combo.scheduler != "local":
            assert len(allocated) == -(-role["count"] // per_node), where
    if combo.scheduler == "slurm":
        queries = [r["scontrol"] for r in run.standins if r["program"] == "scontrol"]
        assert [q["output"] for q in queries if q["command"][1] == "hostnames"] == run.nodes
        assert [q["output"] for q in queries if q["command"][1] == "node"] == [
            [host] for host in hosts
        ], where
    address = {
        host: a
        for names, addrs in zip(run.nodes, run.addresses, strict=True)
        for host, a in zip(names, addrs, strict=True)
    }
    folder = Path(cluster_dir)
    assert (folder / "members").read_text().split("\n")[:-1] == [
        f"{m.name}\t{m.role}\t{m.index}\t{host}\t{address[host]}"
        for m, host in zip(members, hosts, strict=True)
    ], where
    assert (folder / "hosts").read_text().split("\n")[:-1] == [
        "127.0.0.1\tlocalhost",
        *(f"{address[host]}\t{m.name}" for m, host in zip(members, hosts, strict=True)),
    ], where
    assert sorted((folder / "exits").read_text().split("\n")[:-1]) == sorted(
        f"{m.name}\t0" for m in members
    ), where
    if combo.scheduler == "slurm":
        options = sbatch_component_options(run.plan.script)[0]
        if "directory" in doc:
            assert options["chdir"] == [doc["directory"]], where
        if "name" in doc:
            assert options["job-name"] == [doc["name"]], where


def check_cluster_job(
    cluster: HostileClusterJob, combos: tuple[Combo, ...] = CLUSTER_COMBOS
) -> None:
    """Plan the job on every pair, run the scripts side by side (each waits for its members
    at least a second), then check every member of every run."""
    with scratch() as base:
        prepared = [prepare_cluster(cluster, combo, base) for combo in combos]
        with ThreadPoolExecutor(max_workers=len(prepared)) as pool:
            runs = list(pool.map(run_cluster, prepared))
        for run in runs:
            assert_cluster_ran_exactly(run)
        assert canaries(base) == []
