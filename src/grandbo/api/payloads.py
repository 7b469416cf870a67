"""The vendors' webhook bodies, declared for the OpenAPI document (a client generator, a person reading it).

The receiver reads the raw bytes (PagerDuty signs them) and `ingest.adapters` checks them; these models only say
what each vendor sends, the fields Grandbo reads named, the rest allowed (`extra="allow"`: a vendor adds fields).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema


class _Vendor(BaseModel):
    model_config = ConfigDict(extra="allow")


class PagerDutyReference(_Vendor):
    id: str | None = None
    summary: str | None = Field(default=None, description="The service's name (mapped through catalog aliases).")


class PagerDutyIncident(_Vendor):
    id: str = Field(description="The incident's id: every event of one incident is one alert.")
    type: str = Field(description="`incident` (other event data, a note say, carries no alert).")
    title: str | None = Field(default=None, description="What fired; a short title becomes a sentence.")
    number: int | None = None
    status: str | None = None
    urgency: str | None = Field(default=None, description="high or low (the severity, without a priority).")
    incident_key: str | None = None
    created_at: str | None = None
    html_url: str | None = None
    service: PagerDutyReference | None = None
    priority: PagerDutyReference | None = Field(default=None, description="`summary` P1-P5 is the severity.")


class PagerDutyEvent(_Vendor):
    id: str
    event_type: str = Field(description="incident.triggered, incident.resolved...; pagey.ping stores nothing.")
    occurred_at: str | None = None
    data: PagerDutyIncident | dict[str, Any] | None = None


class PagerDutyWebhook(_Vendor):
    """A PagerDuty v3 webhook, signed in `X-PagerDuty-Signature`."""

    event: PagerDutyEvent


class PrometheusAlert(_Vendor):
    status: str = Field(description="firing or resolved.")
    labels: dict[str, str] = Field(default_factory=dict, description="alertname, service (or app, job...), severity.")
    annotations: dict[str, str] = Field(default_factory=dict, description="summary (or title), description.")
    startsAt: str | None = None
    endsAt: str | None = None
    generatorURL: str | None = None
    fingerprint: str | None = None


class AlertmanagerWebhook(_Vendor):
    """A Prometheus Alertmanager webhook (version 4): a group of up to 500 alerts."""

    version: str = "4"
    status: str | None = None
    receiver: str | None = None
    groupLabels: dict[str, str] = Field(default_factory=dict)
    commonLabels: dict[str, str] = Field(default_factory=dict)
    commonAnnotations: dict[str, str] = Field(default_factory=dict)
    externalURL: str | None = None
    alerts: list[PrometheusAlert] = Field(min_length=1, max_length=500)


class GrafanaWebhook(AlertmanagerWebhook):
    """A Grafana unified-alerting webhook contact point: Alertmanager's shape plus title, state and message."""

    version: str = "1"
    title: str | None = None
    state: str | None = None
    message: str | None = None


class OpsgenieAlert(_Vendor):
    alertId: str
    message: str = Field(description="What fired.")
    alias: str | None = None
    description: str | None = None
    priority: str | None = Field(default=None, description="P1-P5.")
    entity: str | None = None
    tags: list[str] = Field(default_factory=list)
    details: dict[str, str] = Field(default_factory=dict, description="`service` names the service.")
    createdAt: int | None = Field(default=None, description="Epoch milliseconds.")


class OpsgenieWebhook(_Vendor):
    """An Opsgenie outgoing webhook."""

    action: str = Field(description="Create, Close, Delete...: Close and Delete resolve the alert.")
    alert: OpsgenieAlert


PAYLOADS: tuple[type[BaseModel], ...] = (PagerDutyWebhook, AlertmanagerWebhook, GrafanaWebhook, OpsgenieWebhook)


def schemas() -> dict[str, Any]:
    """The payloads' JSON schemas, with those they use, keyed by name as `components.schemas` holds them."""
    _, top = models_json_schema(
        [(model, "validation") for model in PAYLOADS], ref_template="#/components/schemas/{model}"
    )
    return dict(top.get("$defs", {}))
