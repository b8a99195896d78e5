"""Gateway settings (pydantic-settings): environment variables `IRI_GATEWAY_*`, or arguments.

Nothing reads settings at import time: `create_app(settings)` and the CLI build them, and
tests pass their own.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from iri_gateway.service.accounts.token_policy import TokenPolicy
    from iri_gateway.service.files.agents import AgentLimits


def default_data_dir() -> Path:
    """`$XDG_DATA_HOME/iri-gateway`, else `~/.local/share/iri-gateway`."""
    import os

    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "iri-gateway"


class Settings(BaseSettings):
    """Everything `iri-gateway serve` can be told."""

    model_config = SettingsConfigDict(env_prefix="IRI_GATEWAY_", extra="forbid")

    data_dir: Path = Field(
        default_factory=default_data_dir, description="Store, tokens file, local job folders"
    )
    profiles: list[Path] = Field(
        default_factory=list,
        description="Profile files or folders; empty: the built-in `local` profile only",
    )
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the job store (`postgresql://` uses psycopg 3); "
        "default: SQLite in the data directory",
    )
    tokens_file: Path | None = Field(
        default=None, description="Bearer tokens (JSON); default: tokens.json in data_dir"
    )
    auth: Literal["tokens", "jwt", "introspection"] = Field(
        default="tokens",
        description="'tokens' (the tokens file), 'jwt' (JWKS-verified JWTs) or "
        "'introspection' (opaque access tokens, each checked at the provider's introspection "
        "endpoint, RFC 7662; the jwt_* claim, audience and issuer settings apply to its "
        "answer)",
    )
    jwks_url: str | None = Field(default=None, description="JWKS URL of the identity provider")
    jwt_issuer: str | None = Field(default=None, description="Expected `iss` of tokens")
    jwt_audience: str | None = Field(default=None, description="Expected `aud` of tokens")
    jwt_username_claim: str = Field(default="sub", description="Claim naming the user")
    jwt_projects_claim: str = Field(default="projects", description="Claim listing projects")
    jwt_roles_claim: str = Field(
        default="roles",
        description="Claim listing the caller's roles (a list or a "
        "space/comma separated string); a dotted name reaches into nested objects, e.g. "
        "`realm_access.roles`",
    )
    jwt_admin_role: str | None = Field(
        default=None,
        min_length=1,
        description="Role in the roles claim that makes the caller a facility admin (e.g. "
        "for the profile check); unset: no JWT is an admin",
    )
    jwt_scope_claim: str = Field(
        default="scope",
        min_length=1,
        description="Claim listing the token's scopes (OAuth's space-separated `scope`, or a "
        "list; dotted names reach into objects)",
    )
    jwt_write_scope: str | None = Field(
        default=None,
        min_length=1,
        description="Scope a JWT needs to change anything (submit, cancel, write files); "
        "without it the token may only read. Unset: every JWT may change",
    )
    jwt_exact_audience: bool = Field(
        default=False,
        description="Refuse a JWT whose `aud` names other services besides `jwt_audience` "
        "(the AmSC rule: a token for this gateway alone)",
    )
    jwt_leeway: float = Field(
        default=0.0,
        ge=0,
        le=300,
        description="Seconds of clock skew allowed when checking a JWT's `exp`, `nbf` and `iat`",
    )
    jwt_introspection_url: str | None = Field(
        default=None,
        description="The identity provider's token introspection endpoint (RFC 7662): each "
        "JWT is checked to be still active (not revoked), and refused (503) while the "
        "provider cannot answer; unset: not asked",
    )
    jwt_introspection_client_id: str | None = Field(
        default=None, description="The gateway's client id at the introspection endpoint"
    )
    jwt_introspection_client_secret: str | None = Field(
        default=None,
        repr=False,
        description="The gateway's client secret at the introspection endpoint",
    )
    jwt_introspection_cache: float = Field(
        default=30.0,
        ge=0,
        le=3600,
        description="Seconds an active answer of the introspection endpoint is trusted: a "
        "revocation takes effect within this time",
    )
    openid_issuer: str | None = Field(
        default=None,
        description="The identity provider (its issuer URL, where its discovery document is) "
        "the console signs in with, by OpenID Connect (authorization code + PKCE); unset: "
        "the console asks for a pasted token. Needs auth 'jwt' (the access tokens it issues "
        "are checked as the API's), openid_client_id and public_url",
    )
    openid_client_id: str | None = Field(
        default=None, description="The gateway's client id at the OpenID provider"
    )
    openid_client_secret: str | None = Field(
        default=None,
        repr=False,
        description="The gateway's client secret at the OpenID provider; unset: a public "
        "client (PKCE only)",
    )
    openid_scopes: str = Field(
        default="openid profile",
        pattern=r"^openid( [!#-\[\]-~]+)*$",
        description="The scopes asked for at sign-in (space-separated, beginning with "
        "`openid`); add the write scope (jwt_write_scope) for a console that may change",
    )
    openid_resource: str | None = Field(
        default=None,
        description="The resource indicator (RFC 8707) asked for at sign-in, for a provider "
        "that makes access tokens per resource (usually the API's audience); unset: none",
    )
    public_url: str | None = Field(
        default=None,
        description="The gateway's address as browsers reach it (an origin, e.g. "
        "https://gateway.example.org): the OpenID callback is "
        "`<public_url>/console/sign-in/callback`, and an https address makes the session "
        "cookies `__Host-` and Secure",
    )
    console_session_lifetime: float = Field(
        default=8 * 3600,
        ge=60,
        le=7 * 86400,
        description="Longest life, in seconds, of a console session opened by an OpenID "
        "sign-in; it ends sooner when its access token does",
    )
    read_token_lifetime: float | None = Field(
        default=None,
        gt=0,
        description="Longest life, in seconds, of a token that may only read (file tokens "
        "and JWTs; `iri-gateway token --read-only` gives it by default); unset: unbounded",
    )
    write_token_lifetime: float | None = Field(
        default=None,
        gt=0,
        description="Longest life, in seconds, of a token that may change (file tokens and "
        "JWTs; `iri-gateway token` gives it by default); unset: unbounded",
    )
    read_token_networks: list[str] = Field(
        default_factory=list,
        description="Networks (CIDR) tokens that may only read are accepted from; empty: anywhere",
    )
    write_token_networks: list[str] = Field(
        default_factory=list,
        description="Networks (CIDR) tokens that may change are accepted from; empty: anywhere",
    )
    poll_fast: float = Field(default=1.0, gt=0, description="Seconds between early polls")
    poll_slow: float = Field(default=30.0, gt=0, description="Longest seconds between polls")
    facility_name: str = Field(default="iri-gateway", description="Name in GET /facility")
    outages: list[str] = Field(
        default_factory=list, description="Resource ids an admin declares down (incidents)"
    )
    submit_concurrency: int = Field(
        default=16,
        ge=1,
        description="Scheduler commands (sbatch, image staging, scancel, update) the "
        "submitter runs at once per resource; more wait in line",
    )
    response_wait: float = Field(
        default=2.0,
        ge=0,
        description="Seconds launchJob, cancelJob and updateJob wait for the scheduler's "
        "answer; past it the job is returned as it is (e.g. `new`, with what is being "
        "done) and the submitter goes on",
    )
    submit_retry_longest: float = Field(
        default=60.0,
        gt=0,
        description="Longest pause, in seconds, between submission attempts while the "
        "scheduler is unavailable (the pause starts at 1 s and doubles)",
    )
    settle_time: float = Field(
        default=30.0,
        ge=0,
        description="Seconds after a submission attempt whose answer was lost (or whose "
        'replica died) before the reconcile may take "the scheduler does not show it" '
        'for "it never got it" and send it again; found by its tag sooner, it is adopted',
    )
    replica_timeout: float = Field(
        default=15.0,
        gt=0,
        description="Seconds without a heartbeat after which the other replicas take this "
        "one for dead and take over its polling and the submissions it was sending (the "
        "heartbeat is written every fifth of it)",
    )
    workers: int | None = Field(
        default=None,
        ge=1,
        description="Serving processes `iri-gateway serve` starts on its one listening "
        "socket, each a replica of its own on the shared store; default: one per CPU core "
        "this process may use with PostgreSQL, exactly one with SQLite (a SQLite store "
        "serves one process); `serve` refuses more than 64",
    )
    database_pool_size: int = Field(
        default=24,
        ge=1,
        description="PostgreSQL connections each gateway process keeps open (as many more "
        "are opened for a burst); the database's max_connections must cover every replica's "
        "twice this",
    )
    max_request_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        description="Largest request body accepted, in bytes; a larger one is refused with "
        "413 before it is read whole (with or without Content-Length)",
    )
    bulk_max_specs: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="Most JobSpecs one bulk launch (launchJobs) takes; a longer list is "
        "refused whole with 413 naming this bound, before any spec is looked at. The body "
        "is still held to max_request_bytes, and each spec counts against write_rate and "
        "active_jobs_per_user as a launch does",
    )

    max_upload_bytes: int = Field(
        default=64 * 1024**3,
        ge=1024,
        description="Largest upload (the request body of the filesystem upload operation), "
        "in bytes; uploads are streamed to disk, never held in memory, so this bounds disk "
        "use, not memory. A larger one is refused with 413 before it is read (with "
        "Content-Length) or as soon as it passes the limit (without), leaving nothing",
    )
    cp_max_files: int = Field(
        default=10_000,
        ge=1,
        description="Most files, folders and links one filesystem `cp` copies (counted "
        "before copying), `compress` stores or `extract` unpacks (members); more is refused "
        "with 413",
    )
    cp_max_bytes: int = Field(
        default=1024**3,
        ge=0,
        description="Most bytes of file content one filesystem `cp` copies, `compress` "
        "stores or `extract` writes (declared by the members, and as written); more is "
        "refused with 413",
    )
    task_workers: int = Field(
        default=4,
        ge=1,
        le=256,
        description="Long filesystem operations (`cp`, `compress`, `extract`) each gateway "
        "process runs at once as background tasks; more wait as `pending`",
    )
    task_progress_interval: float = Field(
        default=0.5,
        ge=0.01,
        le=60,
        description="Seconds between two progress writes of a running task (its "
        "`result.progress`); a cancel made through another replica is seen as often",
    )
    api_docs: bool = Field(
        default=False,
        description="Serve the interactive API docs pages `/docs` (Swagger UI) and `/redoc` "
        "(ReDoc). Off: they load their code from a CDN onto the console's origin, where a "
        "signed-in tab keeps its token; `/openapi.json` is served either way",
    )

    # ---- fairness, rate limits and quotas (docs/operations.md "Limits") -----------------
    task_running_per_user: int | None = Field(
        default=None,
        ge=1,
        description="Background tasks one user runs at once per gateway process; the rest "
        "wait `pending` while other users' tasks take the free workers (fewest running "
        "first). Default: task_workers - 1 (at least 1), so one user never holds every "
        "worker; at most task_workers",
    )
    tasks_per_user: int = Field(
        default=32,
        ge=1,
        le=100_000,
        description="Unfinished (pending or active) background tasks a user may have at "
        "once, over every replica; one more is refused with 409 naming the limit (a "
        "resource's `limits.tasks_per_user` overrides it there)",
    )
    active_jobs_per_user: int = Field(
        default=1000,
        ge=1,
        le=10_000_000,
        description="Jobs a user may have unfinished (not completed, failed or canceled) "
        "on one resource when launching another, over every replica; one more is refused "
        "with 429 naming the limit (a resource's `limits.active_jobs_per_user` overrides it)",
    )
    read_rate: float = Field(
        default=200.0,
        gt=0,
        le=1_000_000,
        description="Requests per second one user may make that change nothing (GET, HEAD, and the "
        "POSTs that only look: `ls`, `stat`, `head`, `getJobs`, `planJob`, ...), "
        "averaged over `rate_window`, shared by every replica; more are answered 429 with "
        "Retry-After",
    )
    write_rate: float = Field(
        default=50.0,
        gt=0,
        le=1_000_000,
        description="Requests per second one user may make that change something "
        "(launches, cancels, filesystem writes, uploads, ...), averaged over "
        "`rate_window`, shared by every replica; more are answered 429 with Retry-After",
    )
    rate_window: float = Field(
        default=10.0,
        ge=1,
        le=3600,
        description="Seconds over which request rates are counted (a sliding window): a "
        "user may send up to rate x window requests in a burst, then rate per second",
    )
    rate_sync_interval: float = Field(
        default=0.5,
        ge=0.05,
        le=60,
        description="Seconds between two exchanges of each replica's request counts "
        "through the database (what one replica lets through before it sees another's "
        "counts)",
    )

    file_agent_cpu_seconds: float = Field(
        default=600.0,
        gt=0,
        description="CPU seconds one filesystem operation other than a read (`cp`, "
        "`compress` with its `match_pattern`, `extract`, `rm`, `checksum`, ...) may use in the "
        "file agent's worker (RLIMIT_CPU, locally and on login nodes); past it the worker is "
        "killed and the operation refused, naming the limit",
    )
    file_agent_read_cpu_seconds: float = Field(
        default=60.0,
        gt=0,
        description="CPU seconds one read (`ls`, `stat`, `head`, `tail`, `view`) may use in "
        "the file agent's worker",
    )
    file_agent_wall_seconds: float = Field(
        default=600.0,
        gt=0,
        description="Seconds one filesystem operation other than a read may take in the file "
        "agent before its worker is killed (what it wrote is removed)",
    )
    file_agent_read_wall_seconds: float = Field(
        default=120.0, gt=0, description="Seconds one read may take in the file agent"
    )
    file_agent_memory_bytes: int = Field(
        default=2 * 1024**3,
        ge=64 * 1024**2,
        description="Address space (RLIMIT_AS), in bytes, of the file agent's worker for one "
        "filesystem operation; more is refused (or the worker dies), naming the limit",
    )
    file_agents_warm: int = Field(
        default=4,
        ge=0,
        le=64,
        description="File agent processes kept started per local resource, so that an `ls` "
        "does not start an interpreter (each serves one request at a time; 0: a new one per "
        "request)",
    )

    # -- metrics (issue 27, item 1) --
    metrics_access: Literal["admin", "token", "open", "off"] = Field(
        default="admin",
        description="Who may read `GET /metrics` (Prometheus): `admin` (a facility admin's "
        "bearer token), `token` (the bearer token in `metrics_token_file`, for a scraper "
        "that should hold no admin token), `open` (anyone who reaches the port: only behind "
        "a firewall), `off` (no `/metrics`, nothing measured)",
    )
    metrics_token_file: Path | None = Field(
        default=None,
        description="File holding the scrape token `metrics_access: token` requires (one "
        "line; Prometheus sends it from `authorization: credentials_file:`); read at each "
        "scrape, so it can be replaced without a restart",
    )
    metrics_task_users: int = Field(
        default=10,
        ge=0,
        le=1000,
        description="Users named in `iri_gateway_task_queue_depth` (those with the most "
        'unfinished tasks); every other user is added up under `user=""`',
    )

    @model_validator(mode="after")
    def _metrics_token_named(self) -> Settings:
        if self.metrics_access == "token" and self.metrics_token_file is None:
            raise ValueError(
                "metrics_access 'token' needs metrics_token_file (the file holding the "
                "scrape token); or choose metrics_access 'admin', 'open' or 'off'"
            )
        return self

    # -- traces and logs (issue 27, items 2 and 3) --
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info",
        description="Least severe log line written to stderr: `info` has one line per "
        "request and per background action, `debug` adds the gateway's details, `warning` "
        "and `error` only trouble",
    )
    log_format: Literal["json", "text"] = Field(
        default="json",
        description="`json`: one JSON object per line (for a log collector); `text`: "
        "`TIME LEVEL LOGGER EVENT MESSAGE key=value ...` for a person reading a terminal",
    )
    otlp_traces_endpoint: str | None = Field(
        default=None,
        description="Where to send traces, OTLP over HTTP (protobuf), as the full URL of the "
        "collector's traces path, e.g. `http://collector:4318/v1/traces`; unset: tracing is "
        "off (no span is made and the OpenTelemetry SDK is not even imported)",
    )
    trace_service_name: str = Field(
        default="iri-gateway",
        min_length=1,
        max_length=200,
        description="The `service.name` the exported spans carry",
    )
    trace_sample_ratio: float = Field(
        default=1.0,
        ge=0,
        le=1,
        description="Share of the traces this gateway starts that are recorded and exported "
        "(0 to 1); a request carrying a W3C `traceparent` follows its caller's decision",
    )

    # -- audit log (issue 27, item 4) --
    audit_retention: int = Field(
        default=365,
        ge=1,
        le=36_500,
        description="Days an audit record is kept; the sweep deletes older ones (the "
        "database refuses deleting any record younger than a day)",
    )
    audit_sweep_interval: float = Field(
        default=3600.0,
        ge=1,
        le=86_400,
        description="Seconds between two retention sweeps of the audit log (each replica "
        "sweeps; one sweep at start)",
    )

    # -- draining on SIGTERM (issue 27, item 6) --
    drain_timeout: float = Field(
        default=30.0,
        ge=0,
        le=3600,
        description="Seconds a serving process (or a worker) stopped by SIGTERM or SIGINT "
        "takes to drain: from the signal `/ready` answers 503 `draining` and the listening "
        "socket closes; requests under way, then scheduler commands and background tasks "
        "under way, get until this time after the signal to finish; what is left then is "
        "cut (the jobs are recorded: the start-up reconcile of the next replica sends "
        'them) and the process exits 0 (docs/operations.md, "Graceful restarts")',
    )

    # -- resource health probes (issue 27, item 7) --
    resource_health_interval: float = Field(
        default=60.0,
        ge=0,
        le=86400,
        description="Seconds between two rounds of each resource's health probes (its "
        "scheduler, its login node, each file root), run by every replica in a background "
        "thread; 0: no probes, and a resource's status is what the admin declares (`outages`)",
    )
    resource_health_timeout: float = Field(
        default=10.0,
        gt=0,
        le=600,
        description="Seconds one health probe may take; past it the probe is counted failed "
        "(`no answer within N s`) and its resource's status says so",
    )

    # -- the event stream and its log (issue 28, items 1 and 5) --
    event_retention: float = Field(
        default=72.0,
        gt=0,
        le=8760,
        description="Hours an event (a state change of a job, a cluster job's member or a "
        "file task) is kept in the event log; a stream resuming from an older "
        "`Last-Event-ID` is told it missed some (`event: gap`)",
    )
    events_heartbeat: float = Field(
        default=15.0,
        gt=0,
        le=300,
        description="Seconds between two `: keep-alive` comments on a quiet event stream "
        "(proxies close idle connections)",
    )
    events_window: int = Field(
        default=4096,
        ge=16,
        le=1_000_000,
        description="Newest events each process keeps in memory for its streams; a stream "
        "further behind reads the event log itself",
    )
    events_streams_per_user: int = Field(
        default=16,
        ge=1,
        le=10_000,
        description="Event streams one user may hold open on one process at once (429 past it)",
    )
    events_streams: int = Field(
        default=2000,
        ge=1,
        le=100_000,
        description="Event streams one process serves at once, all users together (503 "
        "past it, with Retry-After)",
    )

    # -- webhooks (issue 28, item 2) --
    webhook_allowed_networks: list[str] = Field(
        default_factory=list,
        description="Networks (CIDR, e.g. `10.20.0.0/16`, `fd00::/8`) webhooks may be "
        "delivered to although they are loopback, private, link-local, unique-local or "
        "otherwise not public; empty: only public addresses (docs/operations.md, Webhooks)",
    )
    webhook_http_hosts: list[str] = Field(
        default_factory=list,
        description="Hosts (names or addresses, as written in the URL) whose webhook URLs may "
        "be plain `http://`; every other URL must be `https://`",
    )
    webhook_subscriptions_per_user: int = Field(
        default=20,
        ge=1,
        le=10_000,
        description="Standing webhook subscriptions one user may keep; one more is refused "
        "with 409 naming the limit",
    )
    webhook_timeout: float = Field(
        default=10.0,
        gt=0,
        le=120,
        description="Seconds one delivery attempt may take for each step (resolve, connect, "
        "send, first byte of the answer) and in all for reading the answer",
    )
    webhook_retry_first: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="Seconds before the first retry of a failed delivery; each further retry "
        "waits twice as long (with random jitter: between half and all of it), up to "
        "`webhook_retry_longest`",
    )
    webhook_retry_longest: float = Field(
        default=3600.0,
        gt=0,
        le=86_400,
        description="Longest pause, in seconds, between two attempts of one delivery",
    )
    webhook_max_age: float = Field(
        default=86_400.0,
        gt=0,
        le=30 * 86_400,
        description="Seconds after its event a delivery is still tried; past it, it is "
        "given up (`failed`, with the last error)",
    )
    webhook_workers: int = Field(
        default=4,
        ge=1,
        le=256,
        description="Deliveries each gateway process sends at once (one user's deliveries "
        "take at most half of them, at least one)",
    )
    webhook_claim_time: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="Seconds a replica holds a delivery it claimed; a delivery whose replica "
        "died is tried again by another once this has passed (it must exceed the longest "
        "attempt: about 4 x webhook_timeout)",
    )
    webhook_retention: float = Field(
        default=7 * 86_400.0,
        ge=3600,
        le=365 * 86_400,
        description="Seconds a finished delivery (delivered or given up) stays visible to "
        "its user before the sweep deletes it",
    )
    webhook_poll_interval: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="Seconds between two looks for due deliveries and new events when "
        "nothing woke the webhook threads (new events and deliveries made in this process "
        "wake them at once)",
    )

    # -- the port proxy (issue 29) --
    proxy_url: str | None = Field(
        default=None,
        description="The port proxy's own origin, e.g. https://jobs.example.org: requests "
        "whose Host is this URL's host (and port) are served by the proxy, never by the API "
        "or the console, so a job's service runs on an origin apart from the console's. "
        "Unset: the proxy is off (links are refused with 501)",
    )
    proxy_link_ttl: float = Field(
        default=60.0,
        ge=5,
        le=3600,
        description="Seconds a port's link (its one-time ticket) may wait to be opened",
    )
    proxy_session_ttl: float = Field(
        default=12 * 3600.0,
        ge=60,
        le=7 * 86_400,
        description="Seconds a browser's session with one port lasts (its cookie); the job's "
        "end closes it before",
    )
    proxy_connections_per_user: int = Field(
        default=64,
        ge=1,
        le=10_000,
        description="Proxied connections (HTTP requests in flight, WebSockets, tunnels) one "
        "user may hold open on one process (429 past it)",
    )
    proxy_bytes_per_second: int = Field(
        default=64 * 2**20,
        ge=1024,
        description="Bytes per second one user's proxied connections may pass on one process, "
        "together (a faster transfer waits)",
    )
    proxy_connect_timeout: float = Field(
        default=10.0,
        gt=0,
        le=120,
        description="Seconds to connect to a job's port (and to wait for its answer's head)",
    )

    @field_validator("proxy_url", "public_url")
    @classmethod
    def _origin(cls, url: str | None, info: ValidationInfo) -> str | None:
        if url is None:
            return None
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"{info.field_name} {url!r} is not an http or https URL with a host, e.g. "
                "https://gateway.example.org"
            )
        if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
            raise ValueError(
                f"{info.field_name} {url!r} must be an origin only (scheme, host, port)"
                + (
                    ": the proxy serves each job's ports at /<job>/<member>/<port>/ of its "
                    "own origin"
                    if info.field_name == "proxy_url"
                    else ""
                )
            )
        return f"{parts.scheme}://{parts.netloc.lower()}"

    @field_validator("webhook_allowed_networks", "read_token_networks", "write_token_networks")
    @classmethod
    def _networks(cls, networks: list[str], info: ValidationInfo) -> list[str]:
        import ipaddress

        for network in networks:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError as error:
                raise ValueError(
                    f"{info.field_name}: {network!r} is not a network ({error}); "
                    "write it as CIDR, e.g. 10.0.0.0/8 or fd00::/8"
                ) from None
        return networks

    def token_policy(self) -> TokenPolicy:
        """The site's limits per token class (`service.accounts.token_policy`)."""
        from iri_gateway.service.accounts.token_policy import TokenPolicy

        return TokenPolicy.of(
            read_lifetime=self.read_token_lifetime,
            write_lifetime=self.write_token_lifetime,
            read_networks=self.read_token_networks,
            write_networks=self.write_token_networks,
        )

    @model_validator(mode="after")
    def _claim_outlasts_attempt(self) -> Settings:
        if self.webhook_claim_time <= 4 * self.webhook_timeout:
            raise ValueError(
                f"webhook_claim_time ({self.webhook_claim_time:g} s) must exceed 4 x "
                f"webhook_timeout ({4 * self.webhook_timeout:g} s): a delivery still being "
                "sent would be taken over by another replica and sent twice"
            )
        return self

    # -- clients that wait (issue 28, item 4) --

    @field_validator("otlp_traces_endpoint")
    @classmethod
    def _otlp_url(cls, url: str | None) -> str | None:
        from iri_gateway.service.operations.tracing_export import checked_endpoint

        return checked_endpoint(url) if url is not None else None

    @field_validator("database_url")
    @classmethod
    def _psycopg(cls, url: str | None) -> str | None:
        from iri_gateway.service.operations.database import normalise_url

        return normalise_url(url) if url is not None else None

    @model_validator(mode="after")
    def _jwt_complete(self) -> Settings:
        if self.auth == "jwt":
            missing = [
                name
                for name in ("jwks_url", "jwt_issuer", "jwt_audience")
                if getattr(self, name) is None
            ]
            if missing:
                raise ValueError(f"auth 'jwt' needs {', '.join(missing)}")
        if self.auth == "introspection":
            missing = [
                name
                for name in ("jwt_introspection_url", "jwt_issuer", "jwt_audience")
                if getattr(self, name) is None
            ]
            if missing:
                raise ValueError(
                    f"auth 'introspection' needs {', '.join(missing)} (the provider's "
                    "endpoint, and the issuer and audience its answers must name)"
                )
        if self.public_url is not None and self.public_url == self.proxy_url:
            raise ValueError(
                "proxy_url must be another origin than public_url (the console's): a job's "
                "service served from the console's origin could act as its signed-in user"
            )
        if self.openid_issuer is not None:
            missing = [
                name
                for name, value in (
                    ("auth 'jwt' or 'introspection'", self.auth != "tokens" or None),
                    ("openid_client_id", self.openid_client_id),
                    ("public_url", self.public_url),
                )
                if not value
            ]
            if missing:
                raise ValueError(
                    f"openid_issuer (the console's OpenID sign-in) needs {', '.join(missing)}: "
                    "the access tokens it brings are checked as the API's own, and the "
                    "provider sends the browser back to public_url"
                )
        if self.jwt_introspection_url is not None and (
            not self.jwt_introspection_client_id or not self.jwt_introspection_client_secret
        ):
            raise ValueError(
                "jwt_introspection_url needs jwt_introspection_client_id and "
                "jwt_introspection_client_secret (the gateway's client at the provider)"
            )
        return self

    @model_validator(mode="after")
    def _a_request_fits_the_window(self) -> Settings:
        for name in ("read_rate", "write_rate"):
            if getattr(self, name) * self.rate_window < 1:
                raise ValueError(
                    f"{name} x rate_window must be at least 1 request, not "
                    f"{getattr(self, name) * self.rate_window:g}: no request "
                    "would ever be let through"
                )
        return self

    @model_validator(mode="after")
    def _share_within_workers(self) -> Settings:
        if (
            self.task_running_per_user is not None
            and self.task_running_per_user > self.task_workers
        ):
            raise ValueError(
                f"task_running_per_user ({self.task_running_per_user}) cannot "
                f"pass task_workers ({self.task_workers})"
            )
        return self

    @property
    def store_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'jobs.db'}"

    def file_agent_limits(self) -> AgentLimits:
        """The `file_agent_*` settings, as the file agents take them."""
        from iri_gateway.service.files.agents import AgentLimits

        return AgentLimits(
            read_cpu=self.file_agent_read_cpu_seconds,
            cpu=self.file_agent_cpu_seconds,
            read_wall=self.file_agent_read_wall_seconds,
            wall=self.file_agent_wall_seconds,
            memory=self.file_agent_memory_bytes,
            warm=self.file_agents_warm,
        )

    @property
    def tokens_path(self) -> Path:
        return self.tokens_file or self.data_dir / "tokens.json"
