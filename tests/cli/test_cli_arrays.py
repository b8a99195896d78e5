"""Array jobs through the SDK and the CLI against a real `iri-gateway serve` (the module's
server from tests/conftest.py; real processes on the `local` resource): the SDK waits for an
array, pages its elements and cancels chosen ones; `jobs elements` and
`jobs cancel-elements` print and do the same, and refuse bad input with exit code 2."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

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
        shell("exit $((IRI_ARRAY_INDEX / 3))", array={"indices": [0, 1, 2, 3, 4]}),
        project="proj1",
    )
    done = gateway.wait("local", job.id, timeout=60)
    assert done.state == JobState.FAILED
    assert done.meta_data["array"]["counts"] == {"completed": 3, "failed": 2}
    page = gateway.job_elements("local", job.id, offset=3, limit=10)
    assert page.total == 5 and [(e.index, e.exit_code) for e in page.elements] == [(3, 1), (4, 1)]
    failed = gateway.job_elements("local", job.id, state="failed")
    assert [e.index for e in failed.elements] == [3, 4]


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
