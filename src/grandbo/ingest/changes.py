"""Each change source's delivery, read as the source documents it, into `NewChange`s; and one delivery end to end.

* `github`: the `deployment` and `deployment_status` webhook events (`X-GitHub-Event`), signed by
  `X-Hub-Signature-256` (`sha256=` and the hex HMAC-SHA256 of the raw body) with a secret of the org's
  (`grandbo webhooks add github`); `ping` is answered and stores nothing. A deployment is one change (id: the
  deployment's id): its statuses update it (`tiers.changes`), except a waiting one after a final one and
  `inactive` (`_status_replaces`); the deployment event itself only creates it. Its service is the deployment's
  `payload.service` when set (the payload an object, or the JSON text of one as GitHub delivers a payload created
  as text), else the repository's name; its version the deployment's `ref` (else its `sha`); its time the
  deployment's `created_at`; its kind the deployment's `payload.kind` when it is a change kind, `rollback` when the
  task names one, else `deploy`.
* `argocd`: the JSON of the notification template in README (the operator writes Argo CD's template, so the
  fields are ours: `app`, `revision`, `phase`, `sync_status`, `started_at`, `finished_at`, `repo_url`, `url`, and
  optionally `service` and `kind`). One sync operation is one change (id: app, revision and start); a later
  delivery of it replaces it, except a phase that is not final after a final one (`_sync_replaces`).
* `pagerduty`: a PagerDuty change event as its Events API v2 takes one (`routing_key`, `payload.summary`,
  `payload.timestamp`, `payload.source`, `payload.custom_details`, `links`). Its service is
  `custom_details.service`, else `payload.source`; its id `custom_details.id`, else a digest of the event (so a
  retry is the same change, and the first delivery of an id is kept); the routing key is never stored.
* `generic`: `{"id", "service", "kind", "summary", "version", "url", "at"}`, one object or a list.

A time the sender left unset, Go's zero time (`0001-01-01T00:00:00Z`, what a Go template or struct renders for an
unset time.Time) or the Unix epoch (`1970-01-01T00:00:00Z`, a zero timestamp formatted), is absent: Argo CD's
`finished_at` falls back to `started_at`; with no other time the delivery is refused naming the field (filed at it, a
deploy was dated in year 1, outside every triage window: probe 20b C1). Any other time before 2000
is refused in `tiers.changes`, as one far ahead is.

A delivery that is not the documented shape is refused whole (422, naming the field); nothing is half-stored. A
change's url must be an absolute http(s) URL: another (javascript:, data:, file:) refuses the delivery, naming the
field of the source's payload it came from.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from grandbo.errors import InvalidInputError, NotFoundError, SignatureError, validation_fields
from grandbo.model import utcnow
from grandbo.tiers.change_model import URL_RULE, Change, ChangeKind, NewChange
from grandbo.tiers.changes import Outcome, Replaces
from grandbo.urls import web_url_problem
from grandbo.values import UNDECODABLE_REMEDY, iso_8601, undecodable, unset_time

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory

MAX_CHANGES = 1000  # changes in one delivery
FINAL = ("success", "failure", "error")  # a deployment status that ends it (inactive only retires it)
SYNC_FINAL = ("succeeded", "failed", "error")  # an Argo CD operation phase that ends a sync (Running, Terminating)
NO_VALUE = ("", "<no value>")  # what a Go template renders for a field the application does not have


def receive(memory: OrgMemory, source: str, body: bytes, headers: Mapping[str, str]) -> list[tuple[Change, Outcome]]:
    """Take one delivery from `source` for `memory`'s organization; return each change and what became of it.
    A GitHub delivery must carry a valid `X-Hub-Signature-256` for one of the org's github secrets."""
    if source not in PARSERS:
        raise NotFoundError(
            f"Unknown change source {source!r}: post to /v1/changes/SOURCE with one of {', '.join(PARSERS)}.",
            detail={"source": source, "sources": list(PARSERS)},
        )
    headers = {key.lower(): value for key, value in headers.items()}
    if source == "github":
        _verify_github(memory.webhook_secrets.secrets("github"), body, headers.get("x-hub-signature-256"))
    # A deployment event only creates its change: redelivered after a status, it must not undo the status. A
    # PagerDuty change event is never updated (PagerDuty has no such thing): a retry keeps the first one's time.
    event = headers.get("x-github-event")
    creates_only = source == "pagerduty" or (source == "github" and event == "deployment")
    replace: Replaces = not creates_only
    if source == "github" and event == "deployment_status":
        replace = _status_replaces
    elif source == "argocd":
        replace = _sync_replaces
    return memory.changes.receive(parse(source, body, headers), source, replace=replace)


def _status_replaces(known: Change, status: NewChange) -> bool:
    """Whether a deployment status says more than the change stored: never `inactive` (GitHub marks every earlier
    deployment so once a newer one succeeds: their outcome stays), nor a waiting state (queued, pending,
    in_progress) delivered after a final one (GitHub does not promise the order of its deliveries)."""
    before, now = _state(known.summary), _state(status.summary)
    return now != "inactive" and not (before in FINAL and now not in FINAL)


def _sync_replaces(known: Change, sync: NewChange) -> bool:
    """Whether an Argo CD delivery says more than the sync stored: never a phase that is not final (Running,
    Terminating, or no phase: the sync status) after a final one, Succeeded, Failed or Error (an on-sync-running
    notification can arrive after the on-sync-done one: its `finished_at` is unset, and the change's summary and
    time would go back to the start). A later final phase replaces a final one, as any redelivery that differs does:
    one operation ends once, so that is a correction, and the history keeps the earlier one."""
    before, now = _state(known.summary).lower(), _state(sync.summary).lower()
    return not (before in SYNC_FINAL and now not in SYNC_FINAL)


def _state(summary: str) -> str:
    """The status a GitHub or Argo CD change's summary ends its first clause with (`... to production: success
    (...)`, `Argo CD sync of shop to def456: Succeeded`)."""
    head = summary.split(" (", 1)[0]
    return head.rsplit(": ", 1)[-1].strip() if ": " in head else ""


def parse(source: str, body: bytes, headers: Mapping[str, str] | None = None) -> list[NewChange]:
    """The changes of one delivery from `source` (none for GitHub's ping), or InvalidInputError; nothing is
    stored here."""
    try:
        payload = json.loads(body)
    except UnicodeDecodeError as error:
        raise _refuse(source, undecodable(error), remedy=UNDECODABLE_REMEDY) from error
    except (ValueError, RecursionError) as error:
        raise _refuse(source, "the body is not valid JSON") from error
    return PARSERS[source](payload, {key.lower(): value for key, value in (headers or {}).items()})


def sign_github(body: bytes, secret: str) -> str:
    """The `X-Hub-Signature-256` GitHub sends for `body` signed with `secret` (and what tests send)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _verify_github(held: Sequence[str], body: bytes, header: str | None) -> None:
    if not held:
        raise SignatureError(
            "No github webhook secret is set for this organization, so no delivery can be verified. Give the "
            "GitHub webhook a secret and add it: `grandbo webhooks add github --org ORG --secret-file FILE`.",
            detail={"source": "github"},
        )
    offered = (header or "").strip().encode()
    if not any(hmac.compare_digest(offered, sign_github(body, secret).encode()) for secret in held):
        raise SignatureError(
            "The X-Hub-Signature-256 is missing or does not match the body signed with this organization's github "
            "secret. Check the webhook's secret (`grandbo webhooks add github`), its content type "
            "(application/json) and that the body reaches Grandbo unmodified.",
            detail={"source": "github"},
        )


# ------------------------------------------------------------------------------------ sources


def _github(payload: Any, headers: Mapping[str, str]) -> list[NewChange]:
    event = headers.get("x-github-event", "")
    if event == "ping":
        return []
    if event not in ("deployment", "deployment_status"):
        raise _refuse("github", f"the event {event or '(no X-GitHub-Event)'!r} is not a deployment", remedy=(
            "Subscribe the webhook to the Deployments and Deployment statuses events only."))  # fmt: skip
    body = _object(payload, "github", "the body")
    deployment = _object(body.get("deployment"), "github", "deployment")
    repository = _object(body.get("repository"), "github", "repository")
    status = _object(body.get("deployment_status"), "github", "deployment_status") if event != "deployment" else {}
    extra = _payload(deployment.get("payload"))
    environment = _text(status.get("environment")) or _text(deployment.get("environment")) or "an environment"
    version = _text(deployment.get("ref")) or _text(deployment.get("sha"))[:12]
    state = _text(status.get("state")) or "created"
    kind = _text(extra.get("kind"))
    if not _is_kind(kind):
        kind = "rollback" if "rollback" in _text(deployment.get("task")).lower() else "deploy"
    repo = _text(repository.get("full_name")) or _text(repository.get("name"))
    summary = f"{repo} {version} to {environment}: {state}"
    if description := _text(status.get("description")) or _text(deployment.get("description")):
        summary += f" ({description})"
    fields = {
        "id": _field(deployment, "id", "github", "deployment.id"),
        "service": _text(extra.get("service")) or _text(repository.get("name")),
        "kind": kind, "summary": summary[:2000],
        "version": version or None, "at": deployment.get("created_at"),
    }  # fmt: skip
    named, fields["url"] = _first(
        ("deployment_status.log_url", status.get("log_url")),
        ("deployment_status.target_url", status.get("target_url")),
        ("repository.html_url", repository.get("html_url")),
    )
    return [_change("github", {k: v for k, v in fields.items() if v not in NO_VALUE}, "deployment", url_from=named,
                    at_from="deployment.created_at")]  # fmt: skip


def _argocd(payload: Any, headers: Mapping[str, str]) -> list[NewChange]:
    return [_argocd_one(item, f"item {n}") for n, item in enumerate(_items(payload, "argocd"))]


def _argocd_one(value: Any, where: str) -> NewChange:
    given = _object(value, "argocd", where)
    for field in ARGOCD_FIELDS:  # a field of the template's as an object was dropped, then reported missing
        _field(given, field, "argocd", f"{where}: `{field}`")
    sent = {key: _text(item) for key, item in given.items() if _text(item) not in NO_VALUE}
    app, revision = sent.get("app", ""), sent.get("revision", "")
    if not app or not revision:
        raise _refuse("argocd", f"{where} has no `app` or no `revision`", remedy=ARGOCD_REMEDY)
    # An unset time is absent: a template may render a running sync's finish as Go's zero time, its start real.
    unset = {name: sent.pop(name) for name in ("finished_at", "started_at") if unset_time(sent.get(name))}
    at = sent.get("finished_at") or sent.get("started_at")
    if not at and unset:
        name, value = next(iter(unset.items()))
        raise _unset("argocd", where, name, value, optional=True)
    if not at:
        raise _refuse("argocd", f"{where} has neither `finished_at` nor `started_at`", remedy=ARGOCD_REMEDY)
    state = sent.get("phase") or sent.get("sync_status") or "synced"
    fields = {
        "id": sent.get("id") or "@".join(part for part in (app, revision, sent.get("started_at", "")) if part),
        "service": sent.get("service") or app, "kind": sent.get("kind") or "deploy", "version": revision,
        "summary": f"Argo CD sync of {app} to {revision[:12]}: {state}"[:2000], "at": at,
    }  # fmt: skip
    named, url = _first(("url", sent.get("url")), ("repo_url", sent.get("repo_url")))
    return _change("argocd", {**fields, "url": url}, where, url_from=named)


def _pagerduty(payload: Any, headers: Mapping[str, str]) -> list[NewChange]:
    return [_pagerduty_one(item, f"event {n}") for n, item in enumerate(_items(payload, "pagerduty"))]


def _pagerduty_one(value: Any, where: str) -> NewChange:
    event = _object(value, "pagerduty", where)
    if not _field(event, "routing_key", "pagerduty", f"{where}'s routing_key"):
        raise _refuse("pagerduty", f"{where} has no routing_key", remedy=PAGERDUTY_REMEDY)
    inner = _object(event.get("payload"), "pagerduty", f"{where}'s payload")
    details = _mapping(inner.get("custom_details"))
    sent = event.get("links")
    sent = sent if isinstance(sent, list) else []  # a number was iterated: a 500
    links = [link for link in sent if isinstance(link, dict) and _text(link.get("href"))]
    if not _field(inner, "summary", "pagerduty", f"{where}'s payload.summary"):
        raise _refuse("pagerduty", f"{where} has no payload.summary", remedy=PAGERDUTY_REMEDY)
    service = _field(details, "service", "pagerduty", f"{where}'s payload.custom_details.service") or _field(
        inner, "source", "pagerduty", f"{where}'s payload.source"
    )
    if not service:
        raise _refuse("pagerduty", f"{where} names no service", remedy=(
            "Name the service changed in payload.source or payload.custom_details.service."))  # fmt: skip
    digest = hashlib.sha256(json.dumps([inner, links], sort_keys=True, default=str).encode()).hexdigest()[:32]
    fields = {
        "id": _field(details, "id", "pagerduty", f"{where}'s payload.custom_details.id") or digest,
        "service": service, "summary": _text(inner.get("summary"))[:2000],
        "kind": _text(details.get("kind")) or "deploy", "at": inner.get("timestamp") or utcnow(),
        "version": _text(details.get("version")) or _text(details.get("revision")) or None,
        "url": _text(links[0].get("href")) if links else None,
    }  # fmt: skip
    return _change("pagerduty", fields, where, url_from="links[0].href", at_from="payload.timestamp", optional=True)


def _generic(payload: Any, headers: Mapping[str, str]) -> list[NewChange]:
    return [_change("generic", _object(item, "generic", f"item {n}"), f"item {n}")
            for n, item in enumerate(_items(payload, "generic"))]  # fmt: skip


PARSERS: dict[str, Callable[[Any, Mapping[str, str]], list[NewChange]]] = {
    "github": _github, "argocd": _argocd, "pagerduty": _pagerduty, "generic": _generic,
}  # fmt: skip
SOURCES = tuple(PARSERS)  # the change sources `POST /v1/changes/{source}` reads
ARGOCD_FIELDS = ("app", "revision", "phase", "sync_status", "started_at", "finished_at", "repo_url", "url", "service",
                 "kind", "id")  # fmt: skip
ARGOCD_REMEDY = "Send the body of the Argo CD notification template in README (`template.grandbo-change`)."
PAGERDUTY_REMEDY = "Send the change event exactly as PagerDuty's Events API v2 takes it (/v2/change/enqueue)."
GENERIC = '{"id", "service", "kind", "summary", "version", "url", "at"}'


# ------------------------------------------------------------------------------------ shapes


def _change(
    source: str,
    fields: Mapping[str, Any],
    where: str,
    *,
    url_from: str = "url",
    at_from: str = "at",
    optional: bool = False,
) -> NewChange:
    """`fields` as a change, or the refusal naming what fails: `url_from` and `at_from` are where in the delivery
    its url and time were; `optional` says the source may leave its time out."""
    if unset_time(at := fields.get("at")):
        raise _unset(source, where, at_from, at, optional=optional)
    try:
        iso_8601(fields.get("at"))  # a number is no time here (pydantic would read it as seconds since 1970)
    except ValueError as error:
        raise _refuse(source, f"{where}: `at` {error}", detail={"fields": ["at"]}) from None
    url = fields.get("url")
    if isinstance(url, str) and url.strip() and (problem := web_url_problem(url.strip())):
        raise _refuse(source, f"{where}: `{url_from}` {problem}", remedy=f"A change's url {URL_RULE}.",
                      detail={"fields": [url_from]})  # fmt: skip
    try:
        return NewChange.model_validate(dict(fields))
    except ValidationError as error:
        problems = validation_fields(error, "(the change)")
        raise _refuse(source, f"{where}: {', '.join(problems[:5])} fail(s) the checks of a change", remedy=(
            f"A change is {GENERIC}: id, service and at (ISO 8601; no zone is UTC) are required; kind is one of "
            f"{', '.join(k.value for k in ChangeKind)}."), detail={"fields": problems[:20]}) from None  # fmt: skip


def _first(*named: tuple[str, Any]) -> tuple[str, str | None]:
    """The first of (field, value) pairs whose value is text, and that text (None when none is)."""
    return next(((name, _text(value)) for name, value in named if _text(value) not in NO_VALUE), ("url", None))


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _payload(value: Any) -> dict[str, Any]:
    """A GitHub deployment's `payload`: GitHub delivers it as the deployment was created with it, an object or the
    JSON text of one (a string); anything else is no payload."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return {}
    return _mapping(value)


def _is_kind(word: str) -> bool:
    try:
        ChangeKind(word)
    except ValueError:
        return False
    return True


def _items(payload: Any, source: str) -> list[Any]:
    items = payload if isinstance(payload, list) else [payload]
    if not items:
        raise _refuse(source, "the list holds no change")
    if len(items) > MAX_CHANGES:
        raise _refuse(source, f"{len(items)} changes in one delivery, over {MAX_CHANGES}", remedy=(
            f"Send at most {MAX_CHANGES} changes a request."))  # fmt: skip
    return items


def _object(value: Any, source: str, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _refuse(source, f"{where} must be a JSON object")
    return value


def _text(value: Any) -> str:
    return str(value).strip() if isinstance(value, str | int | float) and not isinstance(value, bool) else ""


def _field(container: Mapping[str, Any], key: str, source: str, where: str) -> str:
    """`_text` of `container[key]`; an object, list or boolean there is refused naming the field (read as absent, a
    routing_key sent as an object was reported missing: probe 20b)."""
    value = container.get(key)
    if isinstance(value, dict | list | bool):
        kind = "an object" if isinstance(value, dict) else "a list" if isinstance(value, list) else "a boolean"
        raise _refuse(source, f"{where} must be text or a number, not {kind}", detail={"fields": [where]})
    return _text(value)


def _unset(source: str, where: str, field: str, value: Any, *, optional: bool) -> InvalidInputError:
    """The refusal of a time the sender left unset (`values.unset_time`) where the delivery has no other."""
    instead = " or leave the field out" if optional else ""
    return _refuse(source, f"{where}: `{field}` is {unset_time(value)} ({str(value).strip()[:40]}), an unset field in "
                   f"the sender's template: send the deploy's time{instead}", remedy="Nothing was stored.",
                   detail={"fields": [field]})  # fmt: skip


def _refuse(
    source: str, problem: str, *, remedy: str | None = None, detail: Mapping[str, Any] | None = None
) -> InvalidInputError:
    remedy = remedy or f"Send the payload exactly as {source} documents it (README, Change events)."
    detail = {"source": source, "problem": problem, **(detail or {})}
    return InvalidInputError(f"Malformed {source} change: {problem}. {remedy}", detail=detail)
