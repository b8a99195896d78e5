"""Array jobs through the SDK and the CLI against a real `iri-gateway serve` (the module's
server from tests/conftest.py; real processes on the `local` resource): the SDK waits for an
array, pages its elements and cancels chosen ones; `jobs elements` and
`jobs cancel-elements` print and do the same, and refuse bad input with exit code 2."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from iri_gateway.client import AsyncGatewayClient, GatewayClient, InvalidRequest
from iri_gateway.models.job import JobState
from tests.cli.test_cli_client import cli, shell
from tests.conftest import Server


@pytest.fixture
def gateway(server: Server) -> Iterator[GatewayClient]:
    with GatewayClient(server.url, server.token) as client:
        yield client


def test_the_sdk_waits_for_an_array_and_pages_its_elements(gateway: GatewayClient) -> None:
    job = gateway.submit(
        "local",
        shell(
            "echo out $IRI_ARRAY_INDEX; exit $((IRI_ARRAY_INDEX / 3))",
            array={"indices": [0, 1, 2, 3, 4]},
        ),
        project="proj1",
    )
    done = gateway.wait("local", job.id, timeout=60)
    assert done.state == JobState.FAILED
    assert done.meta_data["array"]["counts"] == {"completed": 3, "failed": 2}
    page = gateway.job_elements("local", job.id, offset=3, limit=10)
    assert page.total == 5 and [(e.index, e.exit_code) for e in page.elements] == [(3, 1), (4, 1)]
    failed = gateway.job_elements("local", job.id, state="failed")
    assert [e.index for e in failed.elements] == [3, 4]
    assert gateway.output("local", job.id, element=3) == "out 3\n"
    with pytest.raises(ValueError, match="is an array: each element writes its own stdout"):
        gateway.output("local", job.id)


def test_the_cli_prints_an_elements_output(server: Server, gateway: GatewayClient) -> None:
    job = gateway.submit(
        "local", shell("echo out $IRI_ARRAY_INDEX", array={"indices": "1-2"}), project="proj1"
    )
    gateway.wait("local", job.id, timeout=60)
    printed = cli(server, "output", job.id, "-r", "local", "--element", "2")
    assert printed.returncode == 0 and printed.stdout == "out 2\n", printed.stderr
    missing = cli(server, "output", job.id, "-r", "local")
    assert missing.returncode == 2 and "--element N" in missing.stderr


def test_the_async_sdk_cancels_chosen_elements(server: Server) -> None:
    async def scenario() -> None:
        async with AsyncGatewayClient(server.url, server.token) as client:
            spec = shell("sleep 30", array={"indices": "0-3", "max_concurrent": 1})
            job = await client.submit("local", spec, project="proj1")
            await client.cancel_elements("local", job.id, [1, 2, 3])
            with pytest.raises(InvalidRequest, match="not elements of this array: 7"):
                await client.cancel_elements("local", job.id, "7")
            await client.cancel("local", job.id)
            done = await client.wait("local", job.id, timeout=60)
            assert done.state == JobState.CANCELED
            page = await client.job_elements("local", job.id)
            assert {e.state for e in page.elements} == {JobState.CANCELED}

    asyncio.run(scenario())


def test_the_cli_lists_and_cancels_elements(server: Server, gateway: GatewayClient) -> None:
    job = gateway.submit(
        "local", shell("sleep 30", array={"indices": "0-5", "max_concurrent": 2}), project="proj1"
    )
    canceled = cli(server, "jobs", "cancel-elements", job.id, "2-5", "-r", "local")
    assert canceled.returncode == 0, canceled.stderr
    bad = cli(server, "jobs", "cancel-elements", job.id, "5-2", "-r", "local")
    assert bad.returncode == 2 and "ends before it begins" in bad.stderr
    gateway.cancel("local", job.id)
    gateway.wait("local", job.id, timeout=60)
    listed = cli(server, "jobs", "elements", job.id, "-r", "local", "--json")
    assert listed.returncode == 0, listed.stderr
    document = json.loads(listed.stdout)
    assert document["total"] == 6
    assert {e["state"] for e in document["elements"]} == {"canceled"}
    table = cli(server, "jobs", "elements", job.id, "-r", "local", "--limit", "2")
    assert table.returncode == 0 and "6 elements of" in table.stdout
    assert "--offset 2 shows more" in table.stderr


def test_submit_with_array_runs_the_file_as_an_array(
    server: Server, gateway: GatewayClient, tmp_path: Path
) -> None:
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps(shell("echo $IRI_ARRAY_INDEX")))
    submitted = cli(
        server,
        "submit",
        str(spec),
        "-r",
        "local",
        "--project",
        "proj1",
        "--array",
        "4-6",
        "--max-concurrent",
        "2",
    )
    assert submitted.returncode == 0, submitted.stderr
    job = gateway.wait("local", submitted.stdout.strip(), timeout=60)
    assert job.meta_data["array"]["counts"] == {"completed": 3}
    assert job.meta_data["array"]["max_concurrent"] == 2
    twice = tmp_path / "array.json"
    twice.write_text(json.dumps(shell("true", array={"indices": "0-1"})))
    both = cli(server, "submit", str(twice), "-r", "local", "--array", "0-3")
    assert both.returncode == 2 and "not both" in both.stderr
    alone = cli(server, "submit", str(spec), "-r", "local", "--max-concurrent", "2")
    assert alone.returncode == 2 and "goes with --array" in alone.stderr
