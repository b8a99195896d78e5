"""The long filesystem operations as background tasks through the test cluster's real SSH
login node: the file agent runs there as the mapped account, its worker prints progress as
lines the gateway reads while it runs; a cancel is a line sent to it, and the worker removes
what it wrote before its task reads `stopped` (or, stuck in one step such as a backtracking
`match_pattern`, is killed by the agent's watchdog, which removes it), as on this machine.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.test_tasks import FILES, FOLDERS, SIZE, assert_grows, big_tree, same_tree, watch
from tests.integration.conftest import ClusterInfo
from tests.integration.gateway_process import Gateway, serve

pytestmark = pytest.mark.integration
V2 = "/api/v2"
RESOURCE = "cluster-ssh"


@pytest.fixture(scope="module")
def gateway(cluster_profile: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """A real serve of the cluster profile, writing progress every 20 ms."""
    data = tmp_path_factory.mktemp("ssh-tasks") / "data"
    with serve(cluster_profile, data, env={"IRI_GATEWAY_TASK_PROGRESS_INTERVAL": "0.02"}) as served:
        yield served


@pytest.fixture
def work(cluster: ClusterInfo) -> Iterator[Path]:
    """A folder in the login account's home holding the big tree and its tar archive,
    owned by that account."""
    home = subprocess.run(
        ["getent", "passwd", cluster.ssh_user], capture_output=True, text=True, check=True
    ).stdout.split(":")[5]
    folder = Path(home) / f"iri-tasks-{uuid.uuid4()}"
    source = big_tree(folder / "big")
    with tarfile.open(folder / "big.tar", "w") as tar:
        tar.add(source, arcname="big")
    account = pwd.getpwnam(cluster.ssh_user)
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, account.pw_uid, account.pw_gid)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def start(http: httpx.Client, gateway: Gateway, operation: str, body: dict[str, str]) -> str:
    answer = http.post(
        f"{V2}/filesystem/{operation}/{RESOURCE}", json=body, headers=gateway.headers()
    )
    assert answer.status_code == 201, answer.text
    task_id: str = answer.json()["task_id"]
    return task_id


def test_copy_and_extract_over_ssh_report_growing_progress_then_complete(
    gateway: Gateway, work: Path
) -> None:
    total = (1 + FOLDERS * (1 + FILES), FOLDERS * FILES * SIZE)
    with httpx.Client(base_url=gateway.url, timeout=120) as http:
        token = gateway.token
        seen, task = watch(
            http,
            token,
            start(http, gateway, "cp", {"path": f"{work}/big", "target_path": f"{work}/copy"}),
        )
        assert task["status"] == "completed", task
        assert_grows(seen, *total)
        assert same_tree(work / "big", work / "copy")

        seen, task = watch(
            http,
            token,
            start(
                http,
                gateway,
                "extract",
                {
                    "path": f"{work}/big.tar",
                    "target_path": f"{work}/out",
                    "compression": "urn:doe-iri:compression:none",
                },
            ),
        )
        assert task["status"] == "completed", task
        assert_grows(seen, *total)
        assert same_tree(work / "big", work / "out" / "big")


@pytest.mark.parametrize("operation", ["cp", "extract"])
def test_a_cancel_over_ssh_stops_the_remote_work_and_leaves_nothing(
    gateway: Gateway, work: Path, operation: str
) -> None:
    before = sorted(p.name for p in work.iterdir())
    body = (
        {"path": f"{work}/big", "target_path": f"{work}/made"}
        if operation == "cp"
        else {
            "path": f"{work}/big.tar",
            "target_path": f"{work}/made",
            "compression": "urn:doe-iri:compression:none",
        }
    )
    with httpx.Client(base_url=gateway.url, timeout=120) as http:
        task_id = start(http, gateway, operation, body)
        watch(
            http,
            gateway.token,
            task_id,
            until=lambda task: task["status"] == "active" and "progress" in (task["result"] or {}),
        )
        answer = http.delete(f"{V2}/task/{task_id}", headers=gateway.headers())
        assert answer.status_code == 200, answer.text
        task = watch(
            http, gateway.token, task_id, until=lambda task: task["result"].get("stopped") is True
        )[1]
        assert task["status"] == "canceled", task
    assert sorted(p.name for p in work.iterdir()) == before, "nothing partial left"


def test_the_remote_writer_killed_mid_copy_leaves_nothing_at_the_target(
    gateway: Gateway, work: Path
) -> None:
    """kill -9 of the agent's worker on the login node mid-`cp`: its task fails with a
    retryable 503 and nothing is left (the agent's watchdog removed the hidden
    `.iri-work-<host>-<pid>-...` entry the worker was writing); the next copy works."""
    before = sorted(p.name for p in work.iterdir())
    body = {"path": f"{work}/big", "target_path": f"{work}/made"}
    with httpx.Client(base_url=gateway.url, timeout=120) as http:
        task_id = start(http, gateway, "cp", body)
        watch(
            http,
            gateway.token,
            task_id,
            until=lambda task: task["status"] == "active" and "progress" in (task["result"] or {}),
        )
        [working] = [p.name for p in work.iterdir() if p.name.startswith(".iri-work-")]
        pid = int(working.split("-")[3])
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert command[:2] == [b"python3", b"-I"], ("not the writer", command)
        os.kill(pid, signal.SIGKILL)
        task = watch(http, gateway.token, task_id)[1]
        assert task["status"] == "failed", task
        assert task["result"]["error"]["status"] == 503, task
        assert sorted(p.name for p in work.iterdir()) == before
        again = start(http, gateway, "cp", body)
        assert watch(http, gateway.token, again)[1]["status"] == "completed"
    assert sorted(p.name for p in work.iterdir()) == sorted([*before, "made"])
    assert same_tree(work / "big", work / "made")


def test_a_backtracking_pattern_over_ssh_is_canceled_at_once_and_leaves_nothing(
    gateway: Gateway, work: Path, cluster: ClusterInfo
) -> None:
    """`match_pattern: (a+)+$` over a name of 30 a's and a '!' holds the login node's worker
    in the regex engine for days: the cancel is answered at once, the watchdog kills the
    worker within about a second, nothing is left; `/health` answered throughout."""
    names = work / "names"
    names.mkdir()
    (names / ("a" * 30 + "!")).write_text("x")
    account = pwd.getpwnam(cluster.ssh_user)
    for path in (names, *names.iterdir()):
        os.chown(path, account.pw_uid, account.pw_gid)
    before = sorted(p.name for p in work.iterdir())
    body = {"path": str(names), "target_path": f"{work}/made.tgz", "match_pattern": "(a+)+$"}
    with httpx.Client(base_url=gateway.url, timeout=120) as http:
        task_id = start(http, gateway, "compress", body)
        watch(http, gateway.token, task_id, until=lambda task: task["status"] == "active")
        time.sleep(2.0)  # deep in the regex by now
        slowest = 0.0
        for _ in range(10):
            began = time.monotonic()
            assert http.get("/health").status_code == 200
            slowest = max(slowest, time.monotonic() - began)
            time.sleep(0.05)
        began = time.monotonic()
        answer = http.delete(f"{V2}/task/{task_id}", headers=gateway.headers())
        answered = time.monotonic() - began
        assert answer.status_code == 200, answer.text
        task = watch(
            http,
            gateway.token,
            task_id,
            deadline=10,
            until=lambda task: (task["result"] or {}).get("stopped") is True,
        )[1]
        stopped = time.monotonic() - began
    assert task["status"] == "canceled", task
    assert answered < 1.0, f"the cancel took {answered:.2f} s to be answered"
    assert stopped < 2.5, f"the task ran {stopped:.2f} s past its cancel"
    assert slowest < 0.2, f"/health took up to {slowest:.3f} s"
    assert sorted(p.name for p in work.iterdir()) == before, "nothing partial left"
