"""How `iri-gateway serve` serves: uvicorn's fast stack, in one process or in N workers.

The stack is named, never guessed: HTTP parsed by httptools (C) on uvloop's event loop; a
missing one fails the start instead of falling back to the pure-Python h11 on asyncio's loop.

Several workers (`--workers N`) are N serving processes on one listening socket, each a
whole replica on the shared PostgreSQL store (`service.operations.replicas`: its own id,
heartbeat, leases, poller and submitter): a worker is a replica started by the same command.
uvicorn's own supervisor (`uvicorn.supervisors.Multiprocess`) binds the socket once, spawns
the workers (fresh interpreters), replaces one that died or stopped answering its health
check, and on SIGTERM or SIGINT stops them all gracefully (each finishes its requests and
its replica says it stopped) before it returns. What must happen once — the first admin
token, the schema migration, the profile check — `serve` does before calling `serve_workers`.

Settings reach the workers through their environment, as `IRI_GATEWAY_*` variables that
pydantic-settings reads (`worker_environment`), and each worker builds its application with
`application`, the factory uvicorn calls: no settings live in a module.
"""

from __future__ import annotations

import ctypes
import gc
import json
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from fastapi import FastAPI

    from iri_gateway.service.operations.settings import Settings


def stack(drain_timeout: float) -> dict[str, Any]:
    """uvicorn's options for every serving process, one or many: httptools' parser (with the
    Host rule, `http_protocol`) on uvloop, and the drain's time for the requests under way
    after SIGTERM (`api.plumbing.draining`)."""
    from iri_gateway.cli.http_protocol import HostCheckedProtocol

    return {
        "http": HostCheckedProtocol,
        # WebSockets (the port proxy's, its tunnels) by wsproto, named like the HTTP parser.
        "ws": "wsproto",
        "loop": "uvloop",
        "log_level": "warning",
        # The gateway's handler writes uvicorn's lines (`log_setup`), and its access log
        # (`api.plumbing.access_log`) replaces uvicorn's.
        "log_config": None,
        "access_log": False,
        "timeout_graceful_shutdown": drain_timeout,
    }


HEALTH_CHECK_SECONDS = 60
"""How long the supervisor waits for a worker to answer its health check (a ping answered
by a thread of the worker) before it takes the worker for hung and replaces it, and, in a
rolling restart (SIGHUP), for a new worker to finish its start-up before it gives the
restart up (keeping the old workers, with an error in the log); generous, as a loaded
machine can keep a busy worker's thread waiting for the interpreter, and a new worker's
start-up (imports, the start-up reconcile) waiting for the CPU its busy peers use."""

MAX_WORKERS = 64
"""Most workers one `serve` starts: each is a whole replica with its own pool of PostgreSQL
connections (`database_pool_size`, twice that in a burst) and its own memory, so more is a
mistake long before it is a speed-up on one host (run more hosts behind a load balancer)."""

_PR_SET_PDEATHSIG = 1
"""prctl(2) option: the signal a process gets when its parent dies."""


def worker_count(settings: Settings) -> int:
    """The `workers` setting, else one per CPU core this process may use with PostgreSQL
    and one with SQLite (whose store serves one process)."""
    from iri_gateway.service.operations.database import is_sqlite

    if settings.workers is not None:
        return settings.workers
    if is_sqlite(settings.store_url):
        return 1
    return len(os.sched_getaffinity(0))


def refusal(settings: Settings, count: int) -> str | None:
    """Why COUNT workers cannot serve the settings' store (a message for the operator), or
    None when they can."""
    from iri_gateway.service.operations.database import display_url, is_sqlite

    if count > MAX_WORKERS:
        return (
            f"--workers/IRI_GATEWAY_WORKERS is {count}, more than {MAX_WORKERS}: every worker "
            "is a whole replica with its own database connections and memory; run at most "
            f"{MAX_WORKERS} (one per CPU core is the default), and more hosts for more"
        )
    if count == 1 or not is_sqlite(settings.store_url):
        return None
    return (
        f"--workers/IRI_GATEWAY_WORKERS is {count}, but the job store is SQLite "
        f"({display_url(settings.store_url)}): a SQLite store serves one process (its single "
        "writer and read cache are that process's; a second replica is refused), so a SQLite "
        "gateway runs one worker. For several workers give a PostgreSQL store "
        "(--database-url postgresql://USER:PASSWORD@HOST/DB), or leave --workers out"
    )


def worker_environment(settings: Settings, count: int) -> dict[str, str]:
    """The `IRI_GATEWAY_*` variables that give every worker the settings the command line
    made (its options over the environment), with paths made absolute."""
    environment = {
        "IRI_GATEWAY_DATA_DIR": str(settings.data_dir.absolute()),
        "IRI_GATEWAY_PROFILES": json.dumps([str(path.absolute()) for path in settings.profiles]),
        "IRI_GATEWAY_WORKERS": str(count),
        "IRI_GATEWAY_LOG_LEVEL": settings.log_level,
        "IRI_GATEWAY_LOG_FORMAT": settings.log_format,
    }
    if settings.database_url is not None:
        environment["IRI_GATEWAY_DATABASE_URL"] = settings.database_url
    return environment


def migrate(settings: Settings) -> None:
    """Bring the store's schema up to date, once, before any worker opens it (DatabaseError
    when it cannot be used); the workers then find it current."""
    from iri_gateway.service.operations.database import open_engine
    from iri_gateway.service.operations.migrations import upgrade_schema

    engine = open_engine(settings.store_url, pool_size=1)
    try:
        upgrade_schema(engine)
    finally:
        engine.dispose()


def serve_one(application: FastAPI, host: str, port: int) -> NoReturn:
    """Serve APPLICATION in this process until SIGTERM or SIGINT, drain, and exit 0.

    uvicorn raises the stop signal again once it has drained, for the handler it found; the
    one set here ignores it (the drain was the signal's work: `kill` and systemd see
    status 0). The exit then skips the interpreter's wait for leftover threads: a scheduler
    command still running past `drain_timeout` is cut there (its job is recorded, the
    reconcile finds or resends it), as a worker's is by its re-raised SIGTERM."""
    import uvicorn

    settings: Settings = application.state.settings
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: None)
    freeze_start_up()
    uvicorn.run(application, host=host, port=port, **stack(settings.drain_timeout))
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def serve_workers(settings: Settings, count: int, host: str, port: int) -> int:
    """COUNT workers on one socket until SIGTERM or SIGINT; the exit status: 0, or 1 when
    a worker could not start (its error is in the output; the others are stopped). Their
    metrics are added up through a directory of this command's (`metrics_processes`)."""
    from iri_gateway.service.operations.metrics_processes import workers_directory

    os.environ.update(worker_environment(settings, count))
    with workers_directory():  # the workers' metrics files, before they import the client
        return _supervise(count, host, port, drain_timeout=settings.drain_timeout)


def _supervise(count: int, host: str, port: int, *, drain_timeout: float) -> int:
    """uvicorn's supervisor over COUNT workers, with the settings in the environment."""
    import uvicorn
    from uvicorn.config import STARTUP_FAILURE
    from uvicorn.supervisors import Multiprocess

    config = uvicorn.Config(
        f"{__name__}:application",
        factory=True,
        host=host,
        port=port,
        workers=count,
        timeout_worker_healthcheck=HEALTH_CHECK_SECONDS,
        **stack(drain_timeout),
    )
    # The supervisor's own lines (a worker died and was replaced, stopping) are the
    # operator's business; the workers keep the warning level.
    logging.getLogger("uvicorn.error").setLevel(logging.INFO)
    supervisor = Multiprocess(config, sockets=[config.bind_socket()])
    supervisor.run()
    if any(process.exitcode == STARTUP_FAILURE for process in supervisor.processes):
        logging.getLogger("uvicorn.error").error(
            "a worker could not start (its error is above); every worker was stopped"
        )
        return 1
    return 0


def freeze_start_up() -> None:
    """Put what start-up built (the app, its routes and models, profiles, templates) out of
    the garbage collector's sight: it lives as long as the serving process, and a collection
    then scans only what requests allocate (measured: 0.4-0.5 ms of a 100-job page was the
    collector scanning the whole heap; docs/benchmarks.md, "CPU per request"). Here, not in
    `create_app`: a process that builds many applications (the tests) must keep collecting
    the ones it dropped."""
    gc.freeze()


def application() -> FastAPI:
    """A worker's application, from the settings in its environment (uvicorn's factory).

    A worker that cannot build it exits with uvicorn's start-up failure status, which stops
    the supervisor: uvicorn lets the factory's exception end the process with status 1,
    and a worker that died so is started again, and fails again, forever."""
    from uvicorn.config import STARTUP_FAILURE

    from iri_gateway.api.app import create_app
    from iri_gateway.errors import GatewayError
    from iri_gateway.service.operations.log_setup import configure_logging
    from iri_gateway.service.operations.settings import Settings

    _end_with_parent()
    try:
        settings = Settings()
        configure_logging(settings.log_level, settings.log_format)
        built = create_app(settings)
        freeze_start_up()
        return built
    except GatewayError as error:  # a database that cannot be used, a profile, ...
        logging.getLogger("uvicorn.error").error("worker %d cannot start: %s", os.getpid(), error)
    except Exception:
        logging.getLogger("uvicorn.error").exception("worker %d cannot start", os.getpid())
    raise SystemExit(STARTUP_FAILURE)


def _end_with_parent() -> None:
    """Have the kernel send this worker SIGTERM when its supervisor dies, even by
    `kill -9`: no orphan keeps serving and polling after its command is gone (Linux; a
    no-op elsewhere)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the supervisor died before the request was made
        os.kill(os.getpid(), signal.SIGTERM)
