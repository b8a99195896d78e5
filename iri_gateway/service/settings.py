"""Gateway settings (pydantic-settings): environment variables `IRI_GATEWAY_*`, or arguments.

Nothing reads settings at import time: `create_app(settings)` and the CLI build them, and
tests pass their own.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from iri_gateway.service.files.agents import AgentLimits


def default_data_dir() -> Path:
    """`$XDG_DATA_HOME/iri-gateway`, else `~/.local/share/iri-gateway`."""
    import os

    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "iri-gateway"


class Settings(BaseSettings):
    """Everything `iri-gateway serve` can be told."""

    model_config = SettingsConfigDict(env_prefix="IRI_GATEWAY_", extra="forbid")

    data_dir: Path = Field(default_factory=default_data_dir,
                           description="Store, tokens file, local job folders")
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
    auth: Literal["tokens", "jwt"] = Field(
        default="tokens", description="'tokens' (the tokens file) or 'jwt' (JWKS-verified JWTs)"
    )
    jwks_url: str | None = Field(default=None, description="JWKS URL of the identity provider")
    jwt_issuer: str | None = Field(default=None, description="Expected `iss` of tokens")
    jwt_audience: str | None = Field(default=None, description="Expected `aud` of tokens")
    jwt_username_claim: str = Field(default="sub", description="Claim naming the user")
    jwt_projects_claim: str = Field(default="projects", description="Claim listing projects")
    jwt_roles_claim: str = Field(
        default="roles", description="Claim listing the caller's roles (a list or a "
        "space/comma separated string); a dotted name reaches into nested objects, e.g. "
        "`realm_access.roles`")
    jwt_admin_role: str | None = Field(
        default=None, min_length=1,
        description="Role in the roles claim that makes the caller a facility admin (e.g. "
        "for the profile check); unset: no JWT is an admin")
    poll_fast: float = Field(default=1.0, gt=0, description="Seconds between early polls")
    poll_slow: float = Field(default=30.0, gt=0, description="Longest seconds between polls")
    facility_name: str = Field(default="iri-gateway", description="Name in GET /facility")
    outages: list[str] = Field(
        default_factory=list, description="Resource ids an admin declares down (incidents)"
    )
    submit_concurrency: int = Field(
        default=16, ge=1,
        description="Scheduler commands (sbatch, image staging, scancel, update) the "
        "submitter runs at once per resource; more wait in line",
    )
    response_wait: float = Field(
        default=2.0, ge=0,
        description="Seconds launchJob, cancelJob and updateJob wait for the scheduler's "
        "answer; past it the job is returned as it is (e.g. `new`, with what is being "
        "done) and the submitter goes on",
    )
    submit_retry_longest: float = Field(
        default=60.0, gt=0,
        description="Longest pause, in seconds, between submission attempts while the "
        "scheduler is unavailable (the pause starts at 1 s and doubles)",
    )
    settle_time: float = Field(
        default=30.0, ge=0,
        description="Seconds after a submission attempt whose answer was lost (or whose "
        "replica died) before the reconcile may take \"the scheduler does not show it\" "
        "for \"it never got it\" and send it again; found by its tag sooner, it is adopted",
    )
    replica_timeout: float = Field(
        default=15.0, gt=0,
        description="Seconds without a heartbeat after which the other replicas take this "
        "one for dead and take over its polling and the submissions it was sending (the "
        "heartbeat is written every fifth of it)",
    )
    database_pool_size: int = Field(
        default=24, ge=1,
        description="PostgreSQL connections each gateway process keeps open (as many more "
        "are opened for a burst); the database's max_connections must cover every replica's "
        "twice this",
    )
    max_request_bytes: int = Field(
        default=1024 * 1024, ge=1024,
        description="Largest request body accepted, in bytes; a larger one is refused with "
        "413 before it is read whole (with or without Content-Length)",
    )

    max_upload_bytes: int = Field(
        default=64 * 1024**3, ge=1024,
        description="Largest upload (the request body of the filesystem upload operation), "
        "in bytes; uploads are streamed to disk, never held in memory, so this bounds disk "
        "use, not memory. A larger one is refused with 413 before it is read (with "
        "Content-Length) or as soon as it passes the limit (without), leaving nothing",
    )
    cp_max_files: int = Field(
        default=10_000, ge=1,
        description="Most files, folders and links one filesystem `cp` copies (counted "
        "before copying), `compress` stores or `extract` unpacks (members); more is refused "
        "with 413",
    )
    cp_max_bytes: int = Field(
        default=1024 ** 3, ge=0,
        description="Most bytes of file content one filesystem `cp` copies, `compress` "
        "stores or `extract` writes (declared by the members, and as written); more is "
        "refused with 413",
    )
    task_workers: int = Field(
        default=4, ge=1, le=256,
        description="Long filesystem operations (`cp`, `compress`, `extract`) each gateway "
        "process runs at once as background tasks; more wait as `pending`",
    )
    task_progress_interval: float = Field(
        default=0.5, ge=0.01, le=60,
        description="Seconds between two progress writes of a running task (its "
        "`result.progress`); a cancel made through another replica is seen as often",
    )

    file_agent_cpu_seconds: float = Field(
        default=600.0, gt=0,
        description="CPU seconds one filesystem operation other than a read (`cp`, "
        "`compress` with its `match_pattern`, `extract`, `rm`, `checksum`, ...) may use in the "
        "file agent's worker (RLIMIT_CPU, locally and on login nodes); past it the worker is "
        "killed and the operation refused, naming the limit",
    )
    file_agent_read_cpu_seconds: float = Field(
        default=60.0, gt=0,
        description="CPU seconds one read (`ls`, `stat`, `head`, `tail`, `view`) may use in "
        "the file agent's worker",
    )
    file_agent_wall_seconds: float = Field(
        default=600.0, gt=0,
        description="Seconds one filesystem operation other than a read may take in the file "
        "agent before its worker is killed (what it wrote is removed)",
    )
    file_agent_read_wall_seconds: float = Field(
        default=120.0, gt=0, description="Seconds one read may take in the file agent")
    file_agent_memory_bytes: int = Field(
        default=2 * 1024**3, ge=64 * 1024**2,
        description="Address space (RLIMIT_AS), in bytes, of the file agent's worker for one "
        "filesystem operation; more is refused (or the worker dies), naming the limit",
    )
    file_agents_warm: int = Field(
        default=4, ge=0, le=64,
        description="File agent processes kept started per local resource, so that an `ls` "
        "does not start an interpreter (each serves one request at a time; 0: a new one per "
        "request)",
    )

    @field_validator("database_url")
    @classmethod
    def _psycopg(cls, url: str | None) -> str | None:
        from iri_gateway.service.database import normalise_url

        return normalise_url(url) if url is not None else None

    @model_validator(mode="after")
    def _jwt_complete(self) -> Settings:
        if self.auth == "jwt":
            missing = [name for name in ("jwks_url", "jwt_issuer", "jwt_audience")
                       if getattr(self, name) is None]
            if missing:
                raise ValueError(f"auth 'jwt' needs {', '.join(missing)}")
        return self

    @property
    def store_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'jobs.db'}"

    def file_agent_limits(self) -> AgentLimits:
        """The `file_agent_*` settings, as the file agents take them."""
        from iri_gateway.service.files.agents import AgentLimits

        return AgentLimits(read_cpu=self.file_agent_read_cpu_seconds,
                           cpu=self.file_agent_cpu_seconds,
                           read_wall=self.file_agent_read_wall_seconds,
                           wall=self.file_agent_wall_seconds,
                           memory=self.file_agent_memory_bytes, warm=self.file_agents_warm)

    @property
    def tokens_path(self) -> Path:
        return self.tokens_file or self.data_dir / "tokens.json"
