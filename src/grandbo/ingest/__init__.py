"""Alerts in: each paging vendor's webhook payload becomes normalized alerts, then a query sentence.

`adapters` reads the payloads exactly as each vendor documents them (PagerDuty v3 webhooks, Alertmanager v4,
Grafana unified alerting, Opsgenie), `signatures` checks PagerDuty's HMAC, `flow` stores the alerts (durably,
before any slow work, idempotent by the sender's event id or fingerprint) and recalls for each new one.
"""
