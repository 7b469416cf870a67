"""Each vendor's webhook payload, read as the vendor documents it, into normalized alerts.

A payload that is not the documented shape is refused whole with `InvalidInputError` (a 422 that names the
field), so an alert is never half-stored.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from grandbo.errors import InvalidInputError
from grandbo.ingest.alert import Alert, service_of, severity_of
from grandbo.names import service_name
from grandbo.urls import web_url_problem
from grandbo.values import NotJsonNumber, strict_json, undecodable, unset_time

MAX_ALERTS = 500  # alerts in one delivery (Alertmanager batches; nothing legitimate sends more)


# Characters of a sender's id (a fingerprint, an event id) an alert may carry: Alertmanager's fingerprints are 16,
# PagerDuty's dedup keys 255, Opsgenie's aliases 512. Refused past it, never cut: an alert's id is its hash.
MAX_SENDER_ID = 4096
# Characters of an alert's labels (names and values, a delivery's commonLabels included), as Grandbo keeps them: a
# Kubernetes alert's are a few hundred. Refused past it, and so is a delivery whose alerts' labels together hold more
# than the delivery's bytes: commonLabels are copied into each alert (Alertmanager and Grafana send them in every
# alert's labels too, so no delivery of theirs is refused), and a 3.7 MB delivery of 100 alerts under 3,700 common
# labels stored 750 MB and took the server to 2.2 GB; under this bound alone, 114 KB of 500 alerts stored 67 MB
# (probe 26).
MAX_LABEL_CHARS = 64 * 1024


def _refuse(source: str, problem: str) -> InvalidInputError:
    return InvalidInputError(
        f"Malformed {source} webhook: {problem}. Send the payload exactly as {source} documents it.",
        detail={"source": source, "problem": problem},
    )


def _object(value: Any, source: str, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _refuse(source, f"{where} must be a JSON object")
    return value


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _string(container: Mapping[str, Any], key: str, source: str, where: str) -> str:
    """`container[key]` stripped, "" when absent or null; a field the sender sent as another type is refused naming
    it (read as absent, an `alertId` of 12345 was reported missing: probe 20b)."""
    value = container.get(key)
    if value is None or isinstance(value, str):
        return _text(value)
    raise _refuse(source, f"{where} must be a string, not {_json_type(value)} ({json.dumps(value)[:40]})")


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "an object" if isinstance(value, dict) else "a list" if isinstance(value, list) else type(value).__name__


def _labels(value: Any, source: str, where: str) -> dict[str, str]:
    if value is None:
        return {}
    labels = _object(value, source, where)
    return {str(k)[:200]: str(v)[:1000] for k, v in labels.items() if isinstance(v, str | int | float | bool)}


def _kept(labels: dict[str, str], source: str, where: str) -> dict[str, str]:
    """`labels` when they hold at most MAX_LABEL_CHARS characters, else the delivery is refused naming `where`
    (checked as each alert is read: a delivery refused for it stops at its first such alert)."""
    if (held := sum(len(name) + len(value) for name, value in labels.items())) > MAX_LABEL_CHARS:
        raise _refuse(source, f"{where} hold {held:,} characters (names and values); at most {MAX_LABEL_CHARS:,} "
                              "are kept")  # fmt: skip
    return labels


def _links(**found: Any) -> dict[str, str]:
    """The payload's links that are absolute http(s) URLs with a host (a javascript: or relative one is dropped:
    `urls.web_url_problem`, the rule every link a face draws follows)."""
    return {kind: url for kind, value in found.items() if web_url_problem(url := _text(value)) is None}


def _time(value: Any) -> datetime | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:  # Opsgenie: epoch ms (true: 1 ms)
        try:
            return datetime.fromtimestamp(value / 1000, tz=UTC) if math.isfinite(value) else None
        except (OverflowError, ValueError, OSError):  # a number past any date: no start time
            return None
    if isinstance(value, str) and value and not unset_time(value):  # Alertmanager's endsAt while firing: 0001-...
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def pagerduty(payload: Mapping[str, Any]) -> list[Alert]:
    """A PagerDuty v3 webhook: `{"event": {"id", "event_type", "occurred_at", "data": {incident}}}`.

    Only events whose data is an incident are alerts. The subscription's `pagey.ping` (PagerDuty's test
    delivery), `service.*` events and incident events about something else (a note, a responder, a status
    update: `data.type` is not `incident`) carry none: they are acknowledged and nothing is stored.

    PagerDuty sends an event, with an id of its own, for every change of an incident (triggered,
    acknowledged, escalated, resolved, reopened...): they are one alert, known by the incident's id, whose status
    follows the events, as an Alertmanager alert is one alert from firing to resolved. Its status is the
    incident's (`data.status`: resolved, else firing; `incident.resolved` is resolved whatever it says), dated by
    the event's `occurred_at` (`changed_at`), which orders the events PagerDuty may deliver late or twice and
    lets a reopened incident fire again (`tiers.alert_status`).
    """
    event = _object(payload.get("event"), "pagerduty", "event")
    event_id = _string(event, "id", "pagerduty", "event.id")
    event_type = _string(event, "event_type", "pagerduty", "event.event_type")
    if not event_id or not event_type:
        raise _refuse("pagerduty", "event.id and event.event_type are required")
    data = _object(event.get("data") or {}, "pagerduty", "event.data")
    if not event_type.startswith("incident.") or _text(data.get("type")) not in ("", "incident"):
        return []
    title = _string(data, "title", "pagerduty", "event.data.title") or _text(data.get("summary"))
    if not title:
        raise _refuse("pagerduty", "event.data.title is required")
    service: dict[str, Any] = data["service"] if isinstance(data.get("service"), dict) else {}
    priority: dict[str, Any] = data["priority"] if isinstance(data.get("priority"), dict) else {}
    severity = severity_of(_text(priority.get("summary"))) or severity_of(
        {"high": "high", "low": "low"}.get(_text(data.get("urgency")))
    )
    incident_id = _string(data, "id", "pagerduty", "event.data.id")
    incident_key = _string(data, "incident_key", "pagerduty", "event.data.incident_key")
    resolved = (
        event_type == "incident.resolved" or _string(data, "status", "pagerduty", "event.data.status") == "resolved"
    )
    labels = {
        "event_type": event_type,
        "incident_number": str(data.get("number", "")),
        "urgency": _text(data.get("urgency")),
        "priority": _text(priority.get("summary")),
        "service_id": _text(service.get("id")),
    }
    return [
        Alert(
            source="pagerduty",
            event_id=incident_id or event_id,
            fingerprint=incident_key or incident_id or event_id,
            status="resolved" if resolved else "firing",
            service=(_text(service.get("summary")) or None) and service_name(_text(service.get("summary"))),
            severity=severity,
            summary=title[:2000],
            description=_text(data.get("description"))[:20_000],
            labels=_kept(
                {k: v for k, v in labels.items() if v},
                "pagerduty",
                "event.data's number, urgency, priority.summary and service.id",
            ),
            links=_links(incident=data.get("html_url")),
            started_at=_time(data.get("created_at")) or _time(event.get("occurred_at")),
            changed_at=_time(event.get("occurred_at")),
        )
    ]


def _prometheus_style(payload: Mapping[str, Any], source: Literal["alertmanager", "grafana"]) -> list[Alert]:
    """Alertmanager v4 and Grafana unified alerting: a group of alerts with labels and annotations."""
    alerts = payload.get("alerts")
    if not isinstance(alerts, list) or not alerts:
        raise _refuse(source, "alerts must be a non-empty list")
    if len(alerts) > MAX_ALERTS:
        raise _refuse(source, f"{len(alerts)} alerts in one delivery; at most {MAX_ALERTS}")
    common = _labels(payload.get("commonLabels"), source, "commonLabels")
    out = []
    for position, raw in enumerate(alerts):
        alert = _object(raw, source, f"alerts[{position}]")
        labels = _kept(
            {**common, **_labels(alert.get("labels"), source, f"alerts[{position}].labels")},
            source,
            f"alerts[{position}].labels with commonLabels",
        )  # copied into each alert: 500 times at most
        annotations = _labels(alert.get("annotations"), source, f"alerts[{position}].annotations")
        summary = annotations.get("summary") or annotations.get("title") or labels.get("alertname", "")
        if not summary.strip():
            raise _refuse(source, f"alerts[{position}] has neither annotations.summary nor labels.alertname")
        fingerprint = _string(alert, "fingerprint", source, f"alerts[{position}].fingerprint")
        fingerprint = fingerprint or _digest(sorted(labels.items()))
        starts = alert.get("startsAt")
        timely = isinstance(starts, str) and (not starts or unset_time(starts) or _time(starts) is not None)
        if starts is not None and not timely:  # kept silently before, in the alert's id, with no start (probe 25)
            example = "2026-01-01T00:00:00Z"
            raise _refuse(source, f"alerts[{position}].startsAt must be an ISO 8601 time such as {example}, not "
                          f"{str(starts)[:40]!r}")  # fmt: skip
        starts = _text(starts)
        status = _string(alert, "status", source, f"alerts[{position}].status")
        out.append(
            Alert(
                source=source,
                event_id=f"{fingerprint}@{starts}",
                fingerprint=fingerprint,
                status="resolved" if status.lower() == "resolved" else "firing",
                service=service_of(labels),
                severity=severity_of(labels.get("severity") or labels.get("priority")),
                summary=summary.strip()[:2000],
                description=(annotations.get("description") or annotations.get("message") or "")[:20_000],
                labels=labels,
                links=_links(
                    source=alert.get("generatorURL"),
                    panel=alert.get("panelURL"),
                    dashboard=alert.get("dashboardURL"),
                    runbook=annotations.get("runbook_url") or annotations.get("runbook"),
                ),
                started_at=_time(starts),
            )
        )
    return out


def alertmanager(payload: Mapping[str, Any]) -> list[Alert]:
    """A Prometheus Alertmanager webhook (version 4): one POST carries a group of alerts."""
    if str(payload.get("version", "4")) != "4":
        raise _refuse("alertmanager", f"version {payload.get('version')!r}; this receiver reads version 4")
    return _prometheus_style(payload, "alertmanager")


def grafana(payload: Mapping[str, Any]) -> list[Alert]:
    """A Grafana unified-alerting webhook contact point: Alertmanager's shape plus title, state and message."""
    return _prometheus_style(payload, "grafana")


def opsgenie(payload: Mapping[str, Any]) -> list[Alert]:
    """An Opsgenie outgoing webhook: `{"action", "alert": {"alertId", "message", "priority", "tags", ...}}`."""
    action = _string(payload, "action", "opsgenie", "action")
    alert = _object(payload.get("alert"), "opsgenie", "alert")
    alert_id = _string(alert, "alertId", "opsgenie", "alert.alertId")
    message = _string(alert, "message", "opsgenie", "alert.message")
    if not action or not alert_id or not message:
        raise _refuse("opsgenie", "action, alert.alertId and alert.message are required")
    details = _labels(alert.get("details"), "opsgenie", "alert.details")
    tags = (
        [str(tag) for tag in alert.get("tags", []) if isinstance(tag, str)]
        if isinstance(alert.get("tags"), list)
        else []
    )
    labels = _kept(
        {**details, "action": action, **({"tags": ",".join(tags)} if tags else {})},
        "opsgenie",
        "alert.details with alert.tags",
    )
    entity = _text(alert.get("entity")).lower()
    return [
        Alert(
            source="opsgenie",
            event_id=alert_id,
            fingerprint=_string(alert, "alias", "opsgenie", "alert.alias") or alert_id,
            status="resolved" if action.lower() in ("close", "delete") else "firing",
            service=service_of(details) or entity or None,
            severity=severity_of(alert.get("priority")),
            summary=message[:2000],
            description=_text(alert.get("description"))[:20_000],
            labels=labels,
            started_at=_time(alert.get("createdAt")),
        )
    ]


ADAPTERS: dict[str, Callable[[Mapping[str, Any]], list[Alert]]] = {
    "pagerduty": pagerduty,
    "alertmanager": alertmanager,
    "grafana": grafana,
    "opsgenie": opsgenie,
}


def parse(source: str, body: bytes) -> list[Alert]:
    """The alerts of one delivery from `source` (none for a delivery that carries no alert, such as PagerDuty's
    ping), or InvalidInputError; nothing is stored here."""
    adapter = ADAPTERS.get(source)
    if adapter is None:
        raise InvalidInputError(
            f"Unknown alert source {source!r}: use one of {', '.join(ADAPTERS)}.", detail={"source": source}
        )
    try:
        payload = strict_json(body)
    except NotJsonNumber as error:  # NaN, Infinity, 1e400 (read as Infinity), a number longer than Python reads
        raise _refuse(source, f"the body contains {error}; send a finite number or a string") from error
    except UnicodeDecodeError as error:  # Latin-1 bytes: "not valid JSON" said nothing of why
        raise _refuse(source, f"{undecodable(error)}; send it encoded as UTF-8") from error
    except (ValueError, RecursionError) as error:  # RecursionError: absurdly nested JSON
        raise _refuse(source, "the body is not valid JSON") from error
    alerts = adapter(_object(payload, source, "the body"))
    labelled = sum(len(name) + len(value) for alert in alerts for name, value in alert.labels.items())
    if labelled > max(len(body), MAX_LABEL_CHARS):  # commonLabels copied into each alert: nothing a vendor sends
        raise _refuse(source, f"its alerts' labels, commonLabels copied into each, hold {labelled:,} characters, more "
                              f"than the {len(body):,} bytes of the delivery; commonLabels are the labels every alert "
                              "of the group carries already")  # fmt: skip
    for position, alert in enumerate(alerts):  # a 1 MB fingerprint was stored whole, twice, with the alert
        for field, value, most in (
            ("fingerprint", alert.fingerprint, MAX_SENDER_ID),
            ("id", alert.event_id, MAX_SENDER_ID + 64),
        ):  # Alertmanager's: with its start
            if len(value) > most:
                raise _refuse(source, f"alert {position}'s {field} is {len(value):,} characters; at most "
                                      f"{MAX_SENDER_ID:,} are kept")  # fmt: skip
    return alerts
