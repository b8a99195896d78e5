"""The FastAPI application factory: `create_app(settings)`; nothing is built at import time.

On start-up the engine reconciles what a crash may have left half-done, then a poller thread
keeps job states current; requests read states from the store, never from the scheduler.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI

from iri_gateway import __version__, console
from iri_gateway.api import audit
from iri_gateway.api.account import limits, me, whoami
from iri_gateway.api.account import routes as account
from iri_gateway.api.compute import arrays, bulk, job_templates, overview, ports, webhooks
from iri_gateway.api.compute import events as job_events
from iri_gateway.api.compute import routes as compute
from iri_gateway.api.compute.event_data import event_data
from iri_gateway.api.compute.events import Rendered, StreamSlots
from iri_gateway.api.compute.models import job_documents
from iri_gateway.api.facility import profile_check
from iri_gateway.api.facility import routes as facility
from iri_gateway.api.filesystem import read_routes, transfer_routes, write_routes
from iri_gateway.api.openapi.errors import document_errors
from iri_gateway.api.openapi.parameters import refusing_unknown_query, without_null_parameters
from iri_gateway.api.plumbing import deps, docs_pages, problems
from iri_gateway.api.plumbing.access_log import AccessLog
from iri_gateway.api.plumbing.audit import AuditTrail
from iri_gateway.api.plumbing.body_limit import BodyLimit
from iri_gateway.api.plumbing.caller_first import require_caller_first
from iri_gateway.api.plumbing.draining import CutByDrain, Drain
from iri_gateway.api.plumbing.head import HeadAsGet
from iri_gateway.api.plumbing.rate_limit import rate_limiter
from iri_gateway.api.plumbing.request_ids import RequestIds
from iri_gateway.api.plumbing.request_metrics import RequestMetrics
from iri_gateway.api.plumbing.security_headers import SecurityHeaders
from iri_gateway.api.plumbing.traces import install as install_traces
from iri_gateway.api.proxy.app import ProxyApp
from iri_gateway.api.proxy.dispatch import ProxyByHost
from iri_gateway.api.sign_in import routes as sign_in
from iri_gateway.api.sign_in.cookies import SECURITY_SCHEME
from iri_gateway.api.status import health, resource_lists
from iri_gateway.api.status import metrics as metrics_route
from iri_gateway.api.status import routes as status
from iri_gateway.api.storage import routes as storage
from iri_gateway.api.tasks import routes as tasks
from iri_gateway.service.accounts.auth import Authenticator, ClaimRules, JwtVerifier, TokenFile
from iri_gateway.service.accounts.introspection import Introspection
from iri_gateway.service.accounts.opaque_tokens import IntrospectedTokenVerifier
from iri_gateway.service.assembly import build_engine
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.jobs.poller import Poller
from iri_gateway.service.operations.audit import AuditSweeper
from iri_gateway.service.operations.memory import Trimmer
from iri_gateway.service.operations.metrics import Metrics, PrometheusMetrics
from iri_gateway.service.operations.settings import Settings


def _authenticator(settings: Settings, tokens: TokenFile) -> Authenticator:
    rules = ClaimRules(
        username_claim=settings.jwt_username_claim,
        projects_claim=settings.jwt_projects_claim,
        roles_claim=settings.jwt_roles_claim,
        admin_role=settings.jwt_admin_role,
        scope_claim=settings.jwt_scope_claim,
        write_scope=settings.jwt_write_scope,
    )
    if settings.auth == "jwt":
        assert settings.jwks_url and settings.jwt_issuer and settings.jwt_audience
        return JwtVerifier(
            jwks_url=settings.jwks_url,
            issuer=settings.jwt_issuer,
            audience=settings.jwt_audience,
            rules=rules,
            exact_audience=settings.jwt_exact_audience,
            leeway=settings.jwt_leeway,
            introspection=_introspection(settings),
        )
    if settings.auth == "introspection":
        introspection = _introspection(settings)
        assert introspection and settings.jwt_issuer and settings.jwt_audience
        return IntrospectedTokenVerifier(
            introspection=introspection,
            issuer=settings.jwt_issuer,
            audience=settings.jwt_audience,
            rules=rules,
            exact_audience=settings.jwt_exact_audience,
            leeway=settings.jwt_leeway,
        )
    return tokens


def _introspection(settings: Settings) -> Introspection | None:
    """The revocation check of JWTs, when the site names its provider's endpoint."""
    if settings.jwt_introspection_url is None:
        return None
    return Introspection(
        settings.jwt_introspection_url,
        client_id=settings.jwt_introspection_client_id or "",
        client_secret=settings.jwt_introspection_client_secret or "",
        cache_seconds=settings.jwt_introspection_cache,
    )


def create_app(
    settings: Settings, *, engine: Engine | None = None, run_poller: bool = True
) -> FastAPI:
    """The gateway's HTTP application."""
    metrics = (
        Metrics()
        if settings.metrics_access == "off"
        else PrometheusMetrics(task_users=settings.metrics_task_users)
    )
    engine = engine or build_engine(settings, metrics=metrics)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # With the settle time: a crashed process's last scheduler command may still be
        # running (an orphaned sbatch retrying against a controller that was down), so a
        # submission attempted moments ago is adopted if the scheduler has it, and otherwise
        # left to the poller's reconcile until it has settled; never sent a second time now.
        # The heartbeat first: the other replicas must see this one alive before it claims.
        engine.replica.beat()
        engine.replica.start()
        engine.tasks.sweep(force=True)  # tasks a killed process left unfinished: failed
        engine.reconcile(settle=engine.settle_time)
        app.state.rate_limiter.start()
        stop = threading.Event()
        thread = None
        if run_poller:
            poller = Poller(engine, fast=settings.poll_fast, slow=settings.poll_slow)
            app.state.poller = poller
            thread = threading.Thread(target=poller.run, args=(stop,), name="poller", daemon=True)
            thread.start()
            engine.resource_health.start()  # probes each resource in its own thread
        trimmer = Trimmer()
        trimmer.start()
        sweeper = AuditSweeper(
            app.state.audit,
            retention_days=settings.audit_retention,
            every=settings.audit_sweep_interval,
        )
        sweeper.start()
        metrics.start(engine, app.state.poller)
        engine.event_hub.start()  # the streams' one reader of the event log
        if run_poller:  # the outbox: dispatch under its lease, send (every replica)
            engine.webhooks.start(render=functools.partial(event_data, engine))
        app.state.started = True
        app.state.drain.watch()  # SIGTERM: `/ready` says draining, and the drain's deadline
        try:
            yield
        finally:
            app.state.drain.unwatch()
            app.state.started = False
            stop.set()
            if thread is not None:
                thread.join(timeout=10)
            app.state.rate_limiter.stop()
            trimmer.stop()
            sweeper.stop()
            metrics.stop()
            engine.close(deadline=app.state.drain.deadline())
            end_traces()

    app = FastAPI(
        title="iri-gateway",
        version=__version__,
        description="HPC job-spec gateway implementing the DOE IRI Facility API v2, with "
        "capability, plan and placement extensions (tag `extensions`).",
        lifespan=lifespan,
        docs_url=None,  # `docs_pages`: off unless the setting `api_docs` turns them on
        redoc_url=None,
        dependencies=[Depends(deps.single_valued_query), Depends(deps.known_query)],
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.drain = Drain(settings.drain_timeout)
    app.state.tokens = TokenFile(settings.tokens_path)
    app.state.authenticator = _authenticator(settings, app.state.tokens)
    app.state.openid = sign_in.openid_of(settings)
    app.state.rate_limiter = rate_limiter(settings, engine)
    app.state.token_policy = settings.token_policy()
    app.state.job_documents = job_documents(settings.proxy_url)
    app.state.event_streams = StreamSlots(
        per_user=settings.events_streams_per_user, total=settings.events_streams
    )
    app.state.rendered_events = Rendered()
    app.state.audit = engine.audit
    app.state.metrics = metrics
    problems.install(app)
    app.add_middleware(CutByDrain, drain=app.state.drain)  # innermost: the headers wrap it
    app.add_middleware(
        BodyLimit, limit=settings.max_request_bytes, exempt=(transfer_routes.UPLOAD_PREFIX,)
    )
    app.add_middleware(RequestMetrics, metrics=metrics)  # inside HeadAsGet: routes known
    app.add_middleware(HeadAsGet)
    app.add_middleware(SecurityHeaders)  # on every answer the routes make
    app.add_middleware(AuditTrail, audit=app.state.audit)  # inside: knows the request's id
    app.add_middleware(AccessLog)  # inside RequestIds: each line names its request
    app.add_middleware(RequestIds)  # every answer names its request
    end_traces = install_traces(app, settings)  # the whole request in its span
    if settings.proxy_url is not None:  # outermost: the proxy's origin never meets the API
        proxy = ProxyApp(
            engine,
            app.state.authenticator,
            secure=settings.proxy_url.startswith("https:"),
            policy=app.state.token_policy,
        )
        app.add_middleware(ProxyByHost, proxy=proxy, proxy_url=settings.proxy_url)
    app.state.started = False
    app.state.poller = None
    routers = [
        module.router
        for module in (
            facility,
            status,
            account,
            me,
            whoami,
            limits,
            compute,
            job_templates,
            webhooks,
            ports,
            arrays,
            bulk,
            read_routes,
            tasks,
            health,
            profile_check,
            transfer_routes,
            write_routes,
            resource_lists,
            storage,
            audit,
        )
    ]
    routers += [compute.extensions, overview.router, job_events.router]
    scraped = metrics_route.router(settings)  # None when `metrics_access` is off
    routers += [scraped] if scraped is not None else []
    for router in routers:
        require_caller_first(router.routes)
        app.include_router(router)
    # The web console (docs/console.md): `/` and `/console/`, a client of the routes above,
    # and its OpenID sign-in (when `openid_issuer` is set).
    app.include_router(sign_in.router)
    app.include_router(console.router)
    docs_pages.install(app, serve=settings.api_docs)

    def openapi() -> dict[str, Any]:
        """FastAPI's document, with every status the server can send (`openapi_errors`),
        parameters as a client can send them and unknown ones refused
        (`openapi_parameters`)."""
        fresh = app.openapi_schema is None
        document = FastAPI.openapi(app)
        if not fresh:
            return document
        document["components"]["securitySchemes"]["consoleSession"] = SECURITY_SCHEME
        without_null_parameters(document)
        refusing_unknown_query(document)
        document_errors(document, [r for router in routers for r in router.routes])
        bulk.document_bound(document, settings.bulk_max_specs)
        return document

    app.openapi = openapi  # type: ignore[method-assign]
    return app
