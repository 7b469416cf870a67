"""The settings of serving requests: what one API process admits of each key and organization, and what it holds
for a connection before it knows who sent it. Part of `config.Settings` (read as `GRANDBO_<NAME>`)."""

from __future__ import annotations

from pydantic import Field, ValidationInfo, field_validator

from grandbo.config_hosted import HostedSettings

MIN_RATE, MAX_RATE = 0.001, 1_000_000  # requests per second (0 turns a limit off), and a burst
RESERVED_FILES = 128  # open files a server keeps for its store, logs, model and threads: not for connections


class ServingSettings(HostedSettings):
    """Admission (rates, an organization's slots) and the HTTP bounds of `grandbo serve`."""

    import_idle_seconds: float = Field(
        default=60.0, ge=1, le=3600,
        description="Seconds a REST import's upload (`POST /v1/import-from/...`) may send nothing, or less than 4 KiB; "
        "past it the upload is dropped, 408 upload_stalled, and its part removed from GRANDBO_HOME.",
    )  # fmt: skip
    rate_limit_per_key: float = Field(
        default=50.0, ge=0, le=MAX_RATE,
        description="Requests per second each API key may send to one API process (a token bucket per key and "
        "process); over it, 429 with Retry-After. 0 turns the limit off.",
    )  # fmt: skip
    rate_limit_burst: int = Field(default=200, ge=1, le=MAX_RATE,
        description="Requests a key may send at once above its rate (the bucket's size).")  # fmt: skip
    rate_limit_per_org: float | None = Field(default=None, ge=0, le=MAX_RATE,
        description="Requests per second all of an org's keys together may send to one API process (bursts 4 "
        "times a key's), so minting keys cannot multiply the limit; 429 past it. Unset: 4 times "
        "GRANDBO_RATE_LIMIT_PER_KEY. 0 turns it off.")  # fmt: skip
    requests_per_org: int = Field(
        default=4, ge=0, le=1000,
        description="Requests of one organization an API process runs at once (REST, webhooks, MCP, the console); "
        "the next wait, without a thread, for one to end, in the order they came, up to "
        "GRANDBO_REQUESTS_WAIT_SECONDS, then 429 with Retry-After. So one org's slow or large requests take at most "
        "this many of the process's 40 worker threads, and of its CPU. 0: no bound.",
    )  # fmt: skip
    large_requests_per_org: int = Field(
        default=1, ge=0, le=1000,
        description="Of those, the requests with a body over 16 KiB (a batch of alerts, entries or changes) of one "
        "organization an API process runs at once; the next wait as above. A large write is Python work under the "
        "process's one interpreter lock and holds the embedded store's write lock: one at a time, an org's batches go "
        "faster and other orgs' requests wait for one, not several. 0: no bound beyond GRANDBO_REQUESTS_PER_ORG.",
    )  # fmt: skip
    requests_wait_seconds: float = Field(
        default=10.0, ge=0, le=300,
        description="How long a request over GRANDBO_REQUESTS_PER_ORG (or GRANDBO_LARGE_REQUESTS_PER_ORG) waits for "
        "its org's turn before 429.",
    )  # fmt: skip

    request_buffer_mb: int = Field(
        default=256, ge=8, le=65_536,
        description="Request bodies one API process holds in memory at once, in MiB, every organization's together "
        "(a body is read whole, once its key is admitted; an import's upload streams to disk and is not counted). "
        "A body that would pass it is refused unread, 503 with Retry-After; one organization's bodies take at most a "
        "quarter of it (at least 4 MiB), 429 with Retry-After past that. Bodies sent before a key is known (the "
        "console's sign-in form) share a sixteenth of it, at most 16 KiB each.",
    )  # fmt: skip
    http_read_seconds: float = Field(
        default=30.0, ge=1, le=3600,
        description="How long a request's headers and body may take to arrive, from its first byte; past it, 408 "
        "and the connection is closed (an import's upload: this long without a byte). Time the request waits "
        "unread for its organization's turn (GRANDBO_REQUESTS_WAIT_SECONDS) is not counted.",
    )  # fmt: skip
    http_max_header_kb: int = Field(
        default=32, ge=8, le=1024,
        description="The most a request's line and headers may take, in KiB; past it, 431 and the connection is "
        "closed.",
    )  # fmt: skip
    http_max_connections: int = Field(
        default=4096, ge=16, le=1_000_000,
        description="Connections one API process keeps open at once; lowered at start to its open-file limit "
        f"less {RESERVED_FILES} (`grandbo serve` raises its soft limit to the hard one first). A connection past "
        "it closes the oldest one that is idle or still sending its request (503 with Retry-After to the latter); "
        "when every one is running a request, the new one gets 503 with Retry-After. Logged as "
        "`http.connections_full`, at most every 10 s.",
    )  # fmt: skip

    @field_validator("rate_limit_per_key", "rate_limit_per_org")
    @classmethod
    def _rate(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is not None and 0 < value < MIN_RATE:  # a refusal's Retry-After is 1/rate: finite, at most 1000 s
            raise ValueError(f"GRANDBO_{str(info.field_name).upper()} is {value:g}: use 0 (no limit) or {MIN_RATE:g} "
                             f"to {MAX_RATE} requests per second")  # fmt: skip
        return value
