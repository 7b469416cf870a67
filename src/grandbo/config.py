"""Every knob Grandbo reads, in one place: environment variables with the `GRANDBO_` prefix."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from grandbo.config_serving import ServingSettings
from grandbo.errors import ConfigError
from grandbo.machine import index_memory_mb, machine_index_memory
from grandbo.model import ORG_ID_PATTERN

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
PYTHON_YOUNG_OBJECTS = 700  # CPython's own young-generation threshold
MIN_SESSION_SECRET = 32  # characters of GRANDBO_WEB_SESSION_SECRET
HOUR, DAY, BUDGET_MS = 3600, 86_400, 600_000  # upper bounds of durations, in seconds (a triage deadline's in ms)
MAX_MB = 1 << 24  # 16 TiB: memory and storage bounds, in MiB (their bytes fit a 64-bit integer)
MAX_BUILD_KB = 2_147_483_647  # Postgres's most maintenance_work_mem
MAX_RETENTION_DAYS = 36_500  # a hundred years: longer is "forever", which is 0


class Settings(ServingSettings):
    """Grandbo's configuration. Each field reads `GRANDBO_<FIELD NAME IN CAPITALS>` (those of serving requests in
    `config_serving`)."""

    # No `inf` or `nan`, and an upper bound on every number: a value past one fails at start, not in a
    # timedelta, a sleep or an SQLite bind of a thread that then dies (probe 20b S1).
    model_config = SettingsConfigDict(env_prefix="GRANDBO_", extra="ignore", allow_inf_nan=False)

    home: Path = Field(
        default=Path("~/.grandbo"),
        description="Holds the embedded store (grandbo.db) and prepared models.",
    )
    database_url: str | None = Field(
        default=None,
        description="Store location: sqlite:///path/to/file.db, or postgresql://... "
        "Default: the SQLite file grandbo.db in GRANDBO_HOME.",
    )
    migrate_database_url: str | None = Field(
        default=None,
        description="Postgres only: the owner role's postgresql://... URL that `grandbo migrate` (or any start) "
        "migrates and grants with; GRANDBO_DATABASE_URL's role must own nothing. Unset: no migrations.",
    )
    backup_database_url: str | None = Field(
        default=None,
        description="Postgres only: the URL `grandbo backup` / `restore` run pg_dump / pg_restore with, a role that "
        "bypasses row-level security (a superuser; to back up only, BYPASSRLS + pg_read_all_data).",
    )
    pg_bin_dir: Path | None = Field(
        default=None, description="Folder of pg_dump and pg_restore (Postgres backups). Default: found on PATH."
    )
    embedding_provider: str | None = Field(
        default=None,
        description="Provider `grandbo init` records in a new store: deterministic, local, bedrock, voyage, openai.",
    )
    org: str = Field(default="default", description="Organization the CLI acts on when --org is not given.")

    # Retrieval.
    lexical_limit: int = Field(default=25, ge=1, le=1000, description="Candidates the lexical arm returns.")
    vector_limit: int = Field(default=25, ge=1, le=1000, description="Candidates the vector arm returns.")
    lexical_min_coverage: float = Field(default=0.2, ge=0.0, le=1.0,
        description="Evidence floor of the lexical list fused with the vector arm: share of the query's idf a "
        "match must carry (the lexical arm alone has none).")  # fmt: skip
    lexical_floor_cap: float | None = Field(
        default=2.0,
        ge=0.0,
        le=100.0,
        description="The most the evidence floor asks of a match, in idfs of a term found in one memory "
        "(long topics: no memory carries a fixed share of every word). Unset: no cap.",
    )
    lexical_floor_terms: int | None = Field(
        default=10,
        ge=1,
        le=1000,
        description="A topic of more distinct terms than this is held to the floor of a topic this long (the "
        "floor's share of its mean term idf times this many terms). Unset: the share of every term.",
    )
    rrf_k: int = Field(default=60, ge=1, le=10_000, description="Reciprocal Rank Fusion constant.")
    vector_min_similarity: float | None = Field(
        default=None,
        ge=-1.0,
        le=1.0,
        description="Cosine floor for the vector arm; default: the provider's calibrated floor.",
    )

    # The embedded store.
    sqlite_synchronous: Literal["FULL", "NORMAL"] = Field(
        default="FULL",
        description="SQLite's synchronous mode (WAL): FULL syncs the log at every commit, so an acknowledged write "
        "survives a power loss; NORMAL syncs at checkpoints only (faster writes; the last commits may roll back "
        "on a power loss, never on a process crash). Measured: benchmarks/sqlite_sync.py, docs/reliability.md.",
    )

    # Postgres.
    pg_pool_size: int = Field(default=10, ge=1, le=500, description="Connections per process to Postgres.")
    store_timeout_seconds: float = Field(default=2.0, gt=0, le=300,
        description="Postgres only: how long a request waits for a connection (and `/readyz` for its health "
        "query) before it is answered 503 store_unavailable; a new connection's handshake gets as long (at least "
        "2 s).")  # fmt: skip
    store_wait_seconds: float = Field(default=0.0, ge=0, le=DAY,
        description="Postgres only: how long `grandbo serve` and `grandbo worker` started while the store does not "
        "answer (down or restarting) wait for it, trying again with back-off; 0: for ever.")  # fmt: skip
    hnsw_threshold: int = Field(default=20_000, ge=1, le=1_000_000_000,
        description="Vectors an org must hold before it gets its own HNSW index (Postgres).")  # fmt: skip
    hnsw_ef_search: int = Field(default=140, ge=10, le=1000, description="HNSW candidate list size at query time.")
    hnsw_m: int = Field(default=16, ge=4, le=100, description="HNSW graph degree (links per node) of new indexes.")
    hnsw_ef_construction: int = Field(
        default=128, ge=16, le=1000, description="HNSW candidate list size while building an index."
    )
    hnsw_build_memory: str = Field(
        default="1GB",
        pattern=r"^[0-9]+(kB|MB|GB)$",
        description="maintenance_work_mem for HNSW builds (~2GB per million 384-d vectors keeps it in memory).",
    )

    # Embedding work.
    embed_batch_size: int = Field(default=64, ge=1, le=2048,
        description="Texts per embedding call (at most the provider's limit of a call: Voyage's 1,000).")  # fmt: skip
    embed_max_attempts: int = Field(default=5, ge=1, le=1000,
        description="Attempts before an embed job counts as failed (a worker that ended while it held the job, its "
        "lease run out, counts one).")  # fmt: skip
    embed_retry_seconds: float = Field(default=30.0, ge=0, le=DAY,
        description="First retry delay; doubles per attempt (a day at most).")  # fmt: skip
    embed_lease_seconds: float = Field(
        default=300.0,
        gt=0,
        le=DAY,
        description="How long a claimed embed job is reserved at most before another worker may take it. Once a "
        "worker has timed its provider it leases a claim for 3 times the work it holds, at least 30 s and twice "
        "GRANDBO_HTTP_TIMEOUT_SECONDS (a call that stalls), so a killed worker's jobs come back in about a minute, not "
        "this; this whole lease covers a first, untimed batch.",
    )
    embed_claim_seconds: float = Field(
        default=2.0,
        gt=0,
        le=HOUR,
        description="Provider work one worker claim holds (up to 8 batches, sized by the provider's measured "
        "speed; one until a batch is timed; what is left past it goes back): an org whose job arrives during a "
        "claim is served in the next one.",
    )
    http_timeout_seconds: float = Field(default=30.0, gt=0, le=HOUR,
        description="Timeout of a call to a hosted provider or LLM, Bedrock's included (with boto3's retries), for "
        "the whole answer (a read that ends past it ends the call: at most about twice this for an endpoint that "
        "trickles its answer); an answer larger than the call could need (its vectors, or 4 MiB from an LLM) is "
        "refused as it arrives. An endpoint that sends its response headers a byte at a time is bounded only per "
        "read (httpx has no timeout for a whole call).")  # fmt: skip
    readyz_counts: bool = Field(
        default=False,
        description="Whether `/readyz`, which needs no key, also reports the embed jobs and the "
        "write-behinds waiting and given up, counted over every organization (one more query). Off, it says the "
        "status and each check's `ok` only: a poller of a shared service saw another org's alert storm arrive and "
        "drain. A service of one organization may set true; every org sees its own in `GET /v1/stats`.",
    )
    provider_probe_seconds: float = Field(
        default=15.0,
        ge=0.01,
        le=HOUR,
        description="While the embedding provider does not answer (`/readyz` says degraded: recall lexical only, "
        "writes queued), how often the process asks it again (one query embedding).",
    )
    # Write-behinds (an incident close's memory and ledger outcome, an edit's learning, a large delivery's
    # triage): recorded with the write that acknowledges them, re-driven until done (`grandbo.redrive`).
    write_behind_max_attempts: int = Field(
        default=8, ge=1, le=1000, description="Failed attempts after which a write-behind stops and counts as failed."
    )
    write_behind_retry_seconds: float = Field(default=10.0, ge=0, le=HOUR,
        description="First retry delay of a failed write-behind; doubles per attempt (1 h at most).")  # fmt: skip
    write_behind_lease_seconds: float = Field(
        default=300.0, gt=0, le=DAY,
        description="How long a process that took a write-behind holds it; one that died gives it up after this.",
    )  # fmt: skip
    write_behind_heartbeat_seconds: float = Field(
        default=5.0, ge=0.5, le=60,
        description="How often a process renews the write-behind leases it holds; one that stops (killed, its "
        "host lost) loses them after 3 of these, and another process takes the work over.",
    )  # fmt: skip
    write_behind_grace_seconds: float = Field(
        default=30.0, ge=0, le=DAY,
        description="How long a write-behind is left to the process that wrote it before a re-driver may take it.",
    )  # fmt: skip
    write_behind_poll_seconds: float = Field(default=2.0, ge=0.01, le=HOUR,
        description="How often a server or worker looks for write-behinds left to re-drive.")  # fmt: skip
    key_cache_seconds: float = Field(default=2.0, ge=0, le=300,
        description="How long a verified API key is trusted without reading the store again. A key revoked "
        "through this server is refused from its next request; one revoked by another process (the CLI, another "
        "server) is accepted for at most this long after the revocation. 0 reads the key on every request.",
    )  # fmt: skip

    gc_young_objects: int = Field(
        default=10_000,
        ge=0,
        le=100_000_000,
        description="`grandbo serve` only: once started, what it holds is frozen out of Python's cycle collector "
        "and young objects are collected every this many net allocations (Python's default is 700). A full "
        "collection stops every request of the process; with a few hundred organizations' indexes kept it took "
        "about 250 ms and came every few seconds. 0 keeps Python's settings; otherwise at least 700.",
    )
    index_memory_mb: int = Field(
        default_factory=index_memory_mb,
        ge=1,
        le=MAX_MB,
        description="Memory a process gives the search indexes it keeps, all organizations together; past it the "
        "caches of the least recently used (entries, term weights) are let go first, then those indexes. One let go "
        "is loaded again from its image in the store in one read; one loaded again within a minute of being let go "
        "is logged as `index.memory_bound_too_small` (at most every five minutes): raise the bound. Unset: a "
        "quarter of the memory the process may use (the smaller of physical memory and its cgroup's limit), at "
        "least 256 MB; a server logs the bound and where it came from as `index.memory_bound`.",
    )

    # Local model (fastembed over an ONNX export of all-MiniLM-L6-v2).
    local_model_dir: Path | None = Field(
        default=None, description="Prepared local model folder. Default: GRANDBO_HOME/models/all-MiniLM-L6-v2."
    )
    local_threads: int | None = Field(default=None, ge=1, le=1024,
        description="ONNX Runtime threads (default: all cores).")  # fmt: skip

    # Triage plans: every budget is a deadline; past one, the plan says what it fell back to.
    triage_recall_budget_ms: float = Field(default=1500.0, gt=0, le=BUDGET_MS,
        description="Re-ranked recall's deadline in a triage; past it, the lexical arm answers.")  # fmt: skip
    triage_llm_budget_ms: float = Field(default=6000.0, gt=0, le=BUDGET_MS,
        description="The LLM narration's deadline; past it, the deterministic plan is returned.")  # fmt: skip
    triage_budget_ms: float = Field(default=8000.0, gt=0, le=BUDGET_MS,
        description="The whole triage's deadline (recall, plan, narration).")  # fmt: skip
    change_window_minutes: int = Field(
        default=120, ge=1, le=7 * 24 * 60,
        description="How far before an alert its plan looks for changes (deploys, config, flags) on its service and "
        "what it depends on; also how soon after an earlier change an incident counts as following it.",
    )  # fmt: skip

    # Shared work: every background pool is bounded, and each organization held to its share of it.
    triage_workers: int = Field(
        default=16, ge=1, le=256,
        description="Threads of the process's triage pool (recall and plan reads); LLM narration gets half as "
        "many (at least 1).",
    )  # fmt: skip
    work_queue: int = Field(
        default=64, ge=1, le=100_000,
        description="Tasks one background pool (triage, narration, write-behinds, webhook triage) holds waiting "
        "at most, for every organization together; past it the request is refused with 503 and Retry-After.",
    )  # fmt: skip
    work_org_share: float = Field(
        default=0.25, ge=0.01, le=1,
        description="The share of a pool's threads and queue one organization may hold at once; past it the "
        "organization's request is refused with 429 and Retry-After (other organizations go on).",
    )  # fmt: skip
    alert_org_backlog: int = Field(
        default=1000, ge=500, le=100_000,
        description="Alerts of one organization a process holds for triage after a webhook's 202 (deliveries of "
        "over 10 firing alerts; served one alert at a time, organizations in turn); a delivery whose new firing "
        "alerts would pass it is refused before it is stored, 429 with Retry-After (one with none new never is). "
        "All orgs together: this over GRANDBO_WORK_ORG_SHARE (503 past it).")  # fmt: skip
    alert_org_backlog_seconds: float = Field(
        default=60.0, ge=10, le=3600,
        description="Seconds an org's waiting alerts may take to triage at its measured time an alert; past it a "
        "delivery is refused, 429 with Retry-After, unless none waits (then one of any size is taken).")  # fmt: skip
    imports_at_once: int = Field(
        default=2, ge=1, le=64,
        description="REST imports (`POST /v1/import-from/...`) one API process runs at once, for every "
        "organization together (an organization's import lease keeps its own to one at a time; a dry run takes "
        "none); past it the import is refused with 503 and Retry-After. One organization runs at most half of "
        "them (at least one), dry runs included; past that, 429 with Retry-After.",
    )  # fmt: skip
    disk_reserve_mb: int = Field(
        default=256, ge=0, le=MAX_MB,
        description="Free space, in MiB, the embedded store keeps on GRANDBO_HOME's disk: under it every "
        "organization's new writes are refused, 507 store_full, while reads, purges, retirements, key revocations "
        "and an organization's deletion go on (the disk never fills); a REST import's upload stops at twice it. "
        "0 turns it off.",
    )  # fmt: skip
    keys_per_org: int = Field(
        default=500, ge=1, le=100_000,
        description="Active API keys one organization may hold; past it `POST /v1/keys` and `grandbo keys create` "
        "are refused, 409 key_limit, until unused keys are revoked (revoked keys do not count).",
    )  # fmt: skip
    services_per_org: int = Field(
        default=10_000, ge=1, le=100_000,
        description="Services one organization's catalog may hold; a write that would add services past it "
        "(`PUT /v1/catalog`, `grandbo catalog import`) is refused whole, 409 service_limit. Each process reads the "
        "catalog whole: at 50,000 services a cold read took 5.9 s, and a change 1.6 s.",
    )  # fmt: skip
    notes_per_org: int = Field(
        default=2_000, ge=1, le=100_000,
        description="Learned notes one organization may hold, of every status, each with its text (each fold "
        "looks among them); past it an edit (`POST /v1/signals`, the MCP tool, `grandbo edit`) is refused, 409 "
        "note_limit, before it is stored, saying how many of each status the org holds. An admin makes room by "
        "deleting the rejected and archived notes (`grandbo notes prune`, `POST /v1/notes/prune`, the console's "
        "Profile page): a rejected rule stays unlearned, kept as its digest, which does not count; and pending notes, "
        "which count too, or any other one at a time (`grandbo notes delete ID`, `DELETE /v1/notes/{id}`).",
    )  # fmt: skip
    org_storage_limit_mb: int = Field(
        default=4096, ge=0, le=MAX_MB,
        description="The most one organization stores, in MiB: the JSON of its memory log and its documents' "
        "history, counted by every write in its own transaction (so on every process alike). A write that would "
        "take an organization past it is refused whole, 507 storage_limit; reads, purges and its deletion go on. "
        "The disk holds 1.8-4 times the count (entry rows and terms, current documents, vectors, index images). "
        "0 turns the limit off.",
    )  # fmt: skip

    group_window_minutes: float = Field(
        default=30.0, ge=0, le=24 * 60,
        description="Alerts of an organization on related services (the same service or at most two hops apart in "
        "the catalog; alike summaries where the catalog cannot say) that fired within this many minutes of a "
        "group's alerts join that group, one candidate incident; 0 turns grouping off.",
    )  # fmt: skip
    alert_retention_days: float = Field(default=90.0, ge=0, le=MAX_RETENTION_DAYS,
        description="Received alerts are kept this many days after their last delivery, then pruned (after a "
        "webhook delivery, at most hourly, 500 at a time, off the request in a server), except those an incident "
        "lists; 0 keeps them forever. At least 30: triage compares an alert with the last 30 days'.")  # fmt: skip

    # Web console.
    web_session_secret: SecretStr | None = Field(
        default=None,
        description="Signs console session cookies; set the same value in every API process. Unset: a random "
        "secret per process (sessions end when it restarts).",
    )
    web_session_hours: float = Field(default=12.0, gt=0, le=24 * 30, description="How long a console sign-in lasts.")

    # Logs.
    log_level: str = Field(
        default="WARNING",
        description="DEBUG, INFO, WARNING or ERROR. Set, every command logs at it on stderr; unset, commands log "
        "nothing (--verbose: INFO) and `grandbo serve` logs at INFO, a line per request.",
    )
    log_json: bool = Field(
        default=False,
        description="Structured JSON logs instead of console lines; unset, `grandbo serve` logs JSON.",
    )

    @field_validator("home", "local_model_dir")
    @classmethod
    def _expand(cls, value: Path | None) -> Path | None:
        return value.expanduser() if value is not None else None

    @field_validator("alert_retention_days")
    @classmethod
    def _retention(cls, value: float) -> float:
        if value != 0 and not value >= 30:
            raise ValueError(
                f"GRANDBO_ALERT_RETENTION_DAYS is {value}: use 0 (keep every alert) or 30 or more (triage compares "
                "an alert with those of the last 30 days)"
            )
        return value

    @field_validator("hnsw_build_memory")
    @classmethod
    def _build_memory(cls, value: str) -> str:
        kb = int(value[:-2]) * {"kB": 1, "MB": 1 << 10, "GB": 1 << 20}[value[-2:]]
        if not 1 << 10 <= kb <= MAX_BUILD_KB:  # Postgres's own range of maintenance_work_mem
            raise ValueError(
                f"GRANDBO_HNSW_BUILD_MEMORY is {value}: use 1MB to {MAX_BUILD_KB >> 20}GB (Postgres's range)"
            )
        return value

    @field_validator("gc_young_objects")
    @classmethod
    def _young_objects(cls, value: int) -> int:
        if 0 < value < PYTHON_YOUNG_OBJECTS:
            raise ValueError(
                f"GRANDBO_GC_YOUNG_OBJECTS is {value}: use 0 (Python's own settings) or {PYTHON_YOUNG_OBJECTS} or "
                "more (fewer would collect more often than Python does)"
            )
        return value

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        level = value.strip().upper()
        if level not in LOG_LEVELS:
            raise ValueError(f"GRANDBO_LOG_LEVEL is {value!r}: use one of {', '.join(LOG_LEVELS)}")
        return level

    @field_validator("org")
    @classmethod
    def _org(cls, value: str) -> str:
        if not ORG_ID_PATTERN.fullmatch(value):
            raise ValueError("org must be lowercase letters, digits, '-' or '_' (at most 63 characters)")
        return value

    def session_secret(self) -> bytes | None:
        """The secret console sessions are signed with (None: a random one per process), or ConfigError when it
        is too short to sign with. Checked where the console starts, not when the settings load: no other
        command uses it, and none should stop for it."""
        if self.web_session_secret is None:
            return None
        secret = self.web_session_secret.get_secret_value()
        if len(secret) < MIN_SESSION_SECRET:
            raise ConfigError(
                f"GRANDBO_WEB_SESSION_SECRET needs at least {MIN_SESSION_SECRET} characters to sign console "
                "sessions: set a longer one (`openssl rand -hex 32` makes one), or unset it for a random secret "
                "per process.",
                detail={"setting": "GRANDBO_WEB_SESSION_SECRET", "min_length": MIN_SESSION_SECRET},
            )
        return secret.encode()

    def index_memory_source(self) -> str:
        """Where GRANDBO_INDEX_MEMORY_MB's value came from: the setting, or the machine (`index_memory_default`)."""
        if "index_memory_mb" in self.model_fields_set:
            return "GRANDBO_INDEX_MEMORY_MB"
        return machine_index_memory()[1]

    @property
    def store_url(self) -> str:
        """The store to open: GRANDBO_DATABASE_URL, or the SQLite file in GRANDBO_HOME."""
        return self.database_url or f"sqlite:///{self.home / 'grandbo.db'}"

    @property
    def model_dir(self) -> Path:
        return self.local_model_dir or self.home / "models" / "all-MiniLM-L6-v2"

    def at_home(self, home: Path) -> Settings:
        """These settings over another home (a scratch store of an evaluation or a benchmark), the local model still
        read from where it was prepared."""
        return self.model_copy(update={"home": home, "local_model_dir": self.model_dir})
