"""Every error Grandbo raises on purpose, with the HTTP status each maps to.

Each message says what happened, why, and what to do next; `detail` carries the values an operator
or an agent can act on. Interfaces render every one of them the same way.

    GrandboError                      500 internal
    ├── ConfigError                   400 config_invalid
    │   ├── UnknownProviderError      400 provider_unknown
    │   └── ModelNotPreparedError     400 model_not_prepared
    ├── InvalidInputError             422 invalid_input
    │   ├── InvalidTopicError         422 topic_too_vague
    │   ├── ImportFormatError         422 import_malformed
    │   ├── PayloadTooLargeError      413 payload_too_large
    │   ├── UploadStalledError        408 upload_stalled    (GRANDBO_IMPORT_IDLE_SECONDS)
    │   ├── HeadersTooLargeError      431 headers_too_large (GRANDBO_HTTP_MAX_HEADER_KB)
    │   └── RequestTimeoutError       408 request_timeout   (GRANDBO_HTTP_READ_SECONDS)
    ├── NotAuthorizedError            401 not_authorized
    │   └── SignatureError            401 signature_invalid
    ├── ForbiddenError                403 forbidden
    ├── NotFoundError                 404 not_found
    │   └── OrgDroppedError           404 org_dropped       (the org was deleted while the work ran)
    ├── ConflictError                 409 conflict
    │   ├── ImportRunningError        409 import_running    (with Retry-After: until the lease runs out)
    │   ├── ProviderMismatchError     409 provider_mismatch
    │   ├── EntryStateError           409 entry_state
    │   ├── ErasedMeanwhileError      409 erased_meanwhile  (work that read text an erasure erased: run again)
    │   ├── KeyLimitError             409 key_limit         (GRANDBO_KEYS_PER_ORG)
    │   ├── ServiceLimitError         409 service_limit     (GRANDBO_SERVICES_PER_ORG)
    │   └── NoteLimitError            409 note_limit        (GRANDBO_NOTES_PER_ORG)
    ├── EmbeddingError                502 embedding_failed
    │   ├── ProviderUnavailableError  503 provider_unavailable
    │   ├── EmbeddingCountError       502 embedding_count_mismatch
    │   ├── EmbeddingDimensionError   502 embedding_dimension_mismatch
    │   └── EmbeddingValueError       502 embedding_unusable   (NaN, Infinity; a query's all-zero vector)
    ├── OverloadedError               503 overloaded        (with Retry-After)
    │   ├── OrgOverloadedError        429 org_over_share    (with Retry-After)
    │   │   ├── AlertBacklogError     429 org_over_share    (with Retry-After; GRANDBO_ALERT_ORG_BACKLOG[_SECONDS])
    │   │   ├── ImportsOrgBusyError   429 org_over_share    (with Retry-After; half of GRANDBO_IMPORTS_AT_ONCE)
    │   │   ├── RequestsOrgBusyError  429 org_over_share    (with Retry-After; GRANDBO_REQUESTS_PER_ORG)
    │   │   │   └── LargeRequestsOrgBusyError  429 org_over_share  (GRANDBO_LARGE_REQUESTS_PER_ORG)
    │   │   ├── ErasuresOrgBusyError  429 org_over_share    (with Retry-After; one erasure per org and process)
    │   │   └── BodiesOrgBusyError    429 org_over_share    (with Retry-After; a quarter of GRANDBO_REQUEST_BUFFER_MB)
    │   ├── AlertsBusyError           503 overloaded        (with Retry-After; the alert-triage pool is full)
    │   ├── ImportsBusyError          503 overloaded        (with Retry-After; GRANDBO_IMPORTS_AT_ONCE)
    │   ├── ErasuresBusyError         503 overloaded        (with Retry-After; two erasures per process)
    │   ├── BodiesBusyError           503 overloaded        (with Retry-After; GRANDBO_REQUEST_BUFFER_MB)
    │   ├── ConnectionsFullError      503 overloaded        (with Retry-After; GRANDBO_HTTP_MAX_CONNECTIONS)
    │   └── RateLimitedError          429 rate_limited      (with Retry-After)
    ├── StrictModeError               500 strict_incomplete
    └── StoreError                    500 store_failed
        ├── StoreUnavailableError     503 store_unavailable
        │   ├── CommitUnknownError    503 commit_unknown
        │   ├── StoreBusyError        503 store_busy
        │   └── StoreUpgradedError    503 store_upgraded    (a newer release migrated the store while this one ran)
        ├── StoreFullError            507 store_full
        │   └── StorageLimitError     507 storage_limit     (GRANDBO_ORG_STORAGE_LIMIT_MB)
        ├── UnreadableRecordError     500 record_unreadable
        └── MigrationError            500 migration_failed
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from pydantic import ValidationError


class GrandboError(Exception):
    """Base of every error Grandbo raises on purpose."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal"
    remedy: ClassVar[str] = "The message says what went wrong; retry, and report it if it persists."

    def __init__(self, message: str, *, detail: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail: dict[str, Any] = detail or {}

    def __init_subclass__(cls, *, status: int | None = None, code: str | None = None, **kwargs: Any) -> None:
        """A subclass states its HTTP status and code as class arguments, as the tree above draws them
        (`class NotFoundError(GrandboError, status=404, code="not_found")`); what it leaves out it inherits."""
        super().__init_subclass__(**kwargs)
        if status is not None:
            cls.status = status
        if code is not None:
            cls.code = code

    def to_dict(self) -> dict[str, Any]:
        """The one error shape every interface returns."""
        return {"error": {"type": self.code, "message": self.message, "remedy": self.remedy, "detail": self.detail}}


class ConfigError(GrandboError, status=400, code="config_invalid"):
    remedy = "Fix the configuration the message names (GRANDBO_* settings or command options)."


class UnknownProviderError(ConfigError, code="provider_unknown"): ...


class ModelNotPreparedError(ConfigError, code="model_not_prepared"):
    remedy = "Run `grandbo models prepare` (or `make setup`) once."


class InvalidInputError(GrandboError, status=422, code="invalid_input"):
    remedy = "Correct the fields the message names and send it again."


class InvalidTopicError(InvalidInputError, code="topic_too_vague"):
    remedy = "Describe the problem in a sentence: the mechanism, the component and the symptom."


class ImportFormatError(InvalidInputError, code="import_malformed"): ...


class NotAuthorizedError(GrandboError, status=401, code="not_authorized"):
    remedy = "Send `Authorization: Bearer <key>` with a key from `grandbo keys create`."


class SignatureError(NotAuthorizedError, code="signature_invalid"):
    remedy = (
        "Check the webhook's signing secret (`grandbo webhooks add SOURCE --secret-file FILE`) and send the body "
        "unmodified."
    )


class ForbiddenError(GrandboError, status=403, code="forbidden"):
    remedy = "Use a key with the scope the message names (`grandbo keys create --scope ...`)."


class PayloadTooLargeError(InvalidInputError, status=413, code="payload_too_large"):
    remedy = "Send a smaller body (split a bulk write into batches)."


class UploadStalledError(InvalidInputError, status=408, code="upload_stalled"):
    """An import's upload sent nothing (or under 4 KiB) in GRANDBO_IMPORT_IDLE_SECONDS: dropped, its part removed."""

    remedy = (
        "Send the export again from a client that sends it without pausing, or import it from the command line "
        "(`grandbo import-from SOURCE FILE`)."
    )


class HeadersTooLargeError(InvalidInputError, status=431, code="headers_too_large"):
    remedy = "Send a request whose line and headers take less than GRANDBO_HTTP_MAX_HEADER_KB (fewer, shorter headers)."


class RequestTimeoutError(InvalidInputError, status=408, code="request_timeout"):
    remedy = (
        "Send the request's headers and body at once, within GRANDBO_HTTP_READ_SECONDS of its first byte (an "
        "import's upload: without a pause that long), on a new connection."
    )


class NotFoundError(GrandboError, status=404, code="not_found"):
    remedy = "Check the id or name; list what exists first."


class OrgDroppedError(NotFoundError, code="org_dropped"):
    """A write of a handle whose organization was deleted after the handle's first write (and may have been created
    again under its name: another organization, which never receives it), or any use of a handle opened for an
    API key or a piece of work of an organization deleted since. `grandbo.incarnation`."""

    remedy = (
        "Run the work again if it belongs in the organization of that name now (with one of its keys: the deleted "
        "organization's keys went with it)."
    )


class ConflictError(GrandboError, status=409, code="conflict"):
    remedy = "Read the current state again and retry with it."


class StaleWriteError(ConflictError):
    """A document write that expected a version another write replaced meanwhile (or a create whose id another
    write took): the read-modify-writes inside Grandbo read again and retry it (`tiers.retry.rewritten`); only a
    caller's own expected version reaches the caller as a 409."""


class WorkDoneError(ConflictError):
    """A write that was to complete leased pending work (`OrgDocuments.put(..., done)`) found it done already, by
    another runner whose lease it outlived: nothing of the write was kept (`tiers.alerts.Alerts.record_recall`)."""


class ImportRunningError(ConflictError, code="import_running"):
    """The organization's import lease is held: by an import that runs, or by one whose process died without
    giving it back (its lease runs out within `tiers.imported.LEASE`). `retry_after`: the seconds until it does."""

    remedy = (
        "Retry when the lease runs out (over HTTP the Retry-After header's seconds; `retry_after_s` in the detail): "
        "imports of one organization run one at a time. If the import that holds it still runs, it renews the lease "
        "and this answer comes again until it ends; if its process died, the next import goes ahead and resumes "
        "where it stopped (a record already filed is counted unchanged)."
    )

    def __init__(self, message: str, *, retry_after: float, detail: dict[str, Any] | None = None) -> None:
        self.retry_after = max(1, math.ceil(retry_after))
        super().__init__(message, detail={**(detail or {}), "retry_after_s": self.retry_after})


class ProviderMismatchError(ConflictError, code="provider_mismatch"): ...


class EntryStateError(ConflictError, code="entry_state"): ...


class ErasedMeanwhileError(ConflictError, code="erased_meanwhile"):
    """A write of work that read the organization's text before an erasure (purge, purge-text) committed: it may
    hold the erased text, so it was refused; the work runs again from what the org holds now (`grandbo.unerased`).
    Not a StaleWriteError: a read-modify-write's retry of its own document would meet it again."""

    remedy = "Run the work again: it reads the organization as the erasure left it."


class KeyLimitError(ConflictError, code="key_limit"):
    """The organization holds GRANDBO_KEYS_PER_ORG active API keys already: no key was made."""

    remedy = (
        "Revoke the keys no one uses (`grandbo keys list`, then `grandbo keys revoke KEY_ID`, or GET /v1/keys and "
        "DELETE /v1/keys/{id}), then make the new one; or ask the operator to raise GRANDBO_KEYS_PER_ORG."
    )


class ServiceLimitError(ConflictError, code="service_limit"):
    """The write would take the organization's catalog past GRANDBO_SERVICES_PER_ORG services: none was written (of
    a large write another write took to the limit between its pieces, the message says how many were)."""

    remedy = (
        "Send the catalog whole with the services to keep and `replace` (`grandbo catalog import FILE --replace`, "
        'or PUT /v1/catalog with `"replace": true`): the others are dropped; or ask the operator to raise '
        "GRANDBO_SERVICES_PER_ORG."
    )


class NoteLimitError(ConflictError, code="note_limit"):
    """The organization holds GRANDBO_NOTES_PER_ORG learned notes already: the edit was not stored."""

    remedy = (
        "An admin deletes the rejected and archived notes (`grandbo notes prune`, POST /v1/notes/prune, or the "
        "console's Profile page; a rejected rule stays unlearned, its digest kept), and the pending notes not wanted, "
        "which count too (`grandbo notes delete ID`, DELETE /v1/notes/{id}); then send the edit again. Or ask the "
        "operator to raise GRANDBO_NOTES_PER_ORG."
    )


class EmbeddingError(GrandboError, status=502, code="embedding_failed"):
    remedy = "The entry is kept; it is embedded later (`grandbo backfill`) once the provider answers."


class ProviderUnavailableError(EmbeddingError, status=503, code="provider_unavailable"): ...


class EmbeddingCountError(EmbeddingError, code="embedding_count_mismatch"): ...


class EmbeddingDimensionError(EmbeddingError, code="embedding_dimension_mismatch"): ...


class EmbeddingValueError(EmbeddingError, code="embedding_unusable"):
    """A vector with NaN or infinite values, or (a query's) all zeros: nothing a cosine can rank."""


class OverloadedError(GrandboError, status=503, code="overloaded"):
    """Back-pressure: the work was refused, not queued; retry after `retry_after` seconds (the `Retry-After`
    header, and `detail.retry_after_s`)."""

    remedy = (
        "Retry after the Retry-After header's seconds; this process is busy with every organization's work. If it "
        "persists, run more API processes or raise GRANDBO_TRIAGE_WORKERS / GRANDBO_WORK_QUEUE."
    )

    def __init__(self, message: str, *, retry_after: float, detail: dict[str, Any] | None = None) -> None:
        self.retry_after = max(1, math.ceil(retry_after))
        super().__init__(message, detail={**(detail or {}), "retry_after_s": self.retry_after})


class OrgOverloadedError(OverloadedError, status=429, code="org_over_share"):
    remedy = (
        "Retry after the Retry-After header's seconds, and send this organization's requests fewer at a time "
        "(wait for answers before sending more); its share of the process is GRANDBO_WORK_ORG_SHARE."
    )


class AlertBacklogError(OrgOverloadedError):
    remedy = (
        "Retry after the Retry-After header's seconds, sending the same delivery whole (it was not stored; its "
        "alerts are stored once however often it is sent): this organization's alerts waiting for triage would "
        "pass GRANDBO_ALERT_ORG_BACKLOG, or take longer than GRANDBO_ALERT_ORG_BACKLOG_SECONDS to triage. "
        "Alertmanager retries by itself; a larger group_interval sends fewer."
    )


class AlertsBusyError(OverloadedError):
    remedy = (
        "Retry after the Retry-After header's seconds, sending the same delivery whole (it was not stored): this "
        "process's alert-triage pool is full with every organization's alerts. If it persists, run more API "
        "processes."
    )


class ImportsBusyError(OverloadedError):
    remedy = (
        "Retry after the Retry-After header's seconds: this API process already runs GRANDBO_IMPORTS_AT_ONCE "
        "imports (of any organization). Raise that setting, or import from the command line (`grandbo import-from "
        "SOURCE FILE`), which runs in its own process."
    )


class ImportsOrgBusyError(OrgOverloadedError):
    remedy = (
        "Retry after the Retry-After header's seconds, once this organization's import running in this API process "
        "(a dry run too, or one whose request was cancelled) has ended: one organization runs at most half of "
        "GRANDBO_IMPORTS_AT_ONCE at once (at least one), so with two or more another organization's import has a place."
    )


class RequestsOrgBusyError(OrgOverloadedError):
    remedy = (
        "Retry after the Retry-After header's seconds, and send this organization's requests fewer at a time: this "
        "API process runs GRANDBO_REQUESTS_PER_ORG of one organization's requests at once, and this one waited "
        "GRANDBO_REQUESTS_WAIT_SECONDS for a turn."
    )


class LargeRequestsOrgBusyError(RequestsOrgBusyError):
    remedy = (
        "Retry after the Retry-After header's seconds, and send this organization's large batches one after the "
        "other: this API process runs GRANDBO_LARGE_REQUESTS_PER_ORG of one organization's requests with a body "
        "over 16 KiB at once, and this one waited GRANDBO_REQUESTS_WAIT_SECONDS for a turn. Smaller batches are not "
        "held to it."
    )


class ErasuresOrgBusyError(OrgOverloadedError):
    remedy = (
        "Retry after the Retry-After header's seconds, once this organization's erasure running in this API process "
        "has ended (one whose request was cancelled runs to its end): an organization runs one erasure at a time in "
        "a process. Ask for several texts one after the other."
    )


class ErasuresBusyError(OverloadedError):
    remedy = (
        "Retry after the Retry-After header's seconds: this API process already runs two erasures (of any "
        "organization). `grandbo purge-text` runs in a process of its own."
    )


class BodiesOrgBusyError(OrgOverloadedError):
    remedy = (
        "Retry after the Retry-After header's seconds, and send this organization's bodies fewer at a time: one "
        "organization's request bodies held by an API process at once take at most a quarter of "
        "GRANDBO_REQUEST_BUFFER_MB."
    )


class BodiesBusyError(OverloadedError):
    remedy = (
        "Retry after the Retry-After header's seconds: this API process holds GRANDBO_REQUEST_BUFFER_MB of request "
        "bodies (every organization's) already. If it persists, raise that setting or run more API processes."
    )


class ConnectionsFullError(OverloadedError):
    remedy = (
        "Retry after the Retry-After header's seconds: every one of this API process's GRANDBO_HTTP_MAX_CONNECTIONS "
        "connections is running a request. If it persists, raise that setting (and the open-file limit) or run more "
        "API processes."
    )


class RateLimitedError(OverloadedError, status=429, code="rate_limited"):
    remedy = (
        "Retry after the Retry-After header's seconds and slow down: this key is over GRANDBO_RATE_LIMIT_PER_KEY "
        "requests per second (bursts of GRANDBO_RATE_LIMIT_BURST), or its organization's keys together over "
        "GRANDBO_RATE_LIMIT_PER_ORG, in this API process."
    )


class StrictModeError(GrandboError, code="strict_incomplete"): ...


class StoreError(GrandboError, code="store_failed"): ...


class UnreadableRecordError(StoreError, code="record_unreadable"):
    """A stored document this release cannot read as its model."""


class StoreUnavailableError(StoreError, status=503, code="store_unavailable"):
    remedy = "Retry shortly; check that the database is reachable (GRANDBO_DATABASE_URL)."


class CommitUnknownError(StoreUnavailableError, code="commit_unknown"):
    """The connection was lost while the database committed: the write may or may not have happened."""


class StoreBusyError(StoreUnavailableError, code="store_busy"):
    """Another process held the SQLite file's write lock past the busy timeout: nothing was written."""

    remedy = (
        "Retry when the other process's work (an import, backup, restore, purge or migration) is done; "
        "for many writers at once, use Postgres (GRANDBO_DATABASE_URL)."
    )


class StoreUpgradedError(StoreUnavailableError, code="store_upgraded"):
    """A newer release migrated the store while this process ran (a rolling upgrade): this process neither reads
    nor writes it any more, since it would read or write rows the way the schema it knew had them
    (`store.fence`)."""

    remedy = "Restart this process with the release that migrated the store; the processes already on it serve."


class StoreFullError(StoreError, status=507, code="store_full"):
    """The disk holding the embedded store (or a file being written, such as a backup) is full: nothing was
    written, and no partial file is left."""

    remedy = (
        "Free space on the disk that holds the store (GRANDBO_HOME, or the path in GRANDBO_DATABASE_URL) or the "
        "file named, or move it to a larger disk; then retry. Reads go on meanwhile."
    )


class StorageLimitError(StoreFullError, code="storage_limit"):
    """The write would take its organization past the operator's limit on what one organization stores
    (GRANDBO_ORG_STORAGE_LIMIT_MB): nothing of it was written (`store.sql.storage`)."""

    remedy = (
        "Purge what the organization no longer needs (`grandbo purge ENTRY_ID`, `POST /v1/memories/{id}/purge`; "
        "`grandbo purge-text` for text in incidents and alerts), or ask the operator to raise "
        "GRANDBO_ORG_STORAGE_LIMIT_MB; then retry. Its stored bytes are in `GET /v1/stats`. Reads go on meanwhile."
    )


class MigrationError(StoreError, code="migration_failed"): ...


def validation_problems(error: ValidationError, whole: str = "") -> str:
    """A pydantic validation error in one line, `field.path: message; ...` (`whole` names a problem of the
    whole record, which has no field path)."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or whole}: {e['msg']}" for e in error.errors())


def validation_fields(error: ValidationError, whole: str = "") -> list[str]:
    """The field paths a pydantic validation error names, sorted, each once."""
    return sorted({".".join(map(str, e["loc"])) or whole for e in error.errors()})
