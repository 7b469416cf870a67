"""What each tool parameter means, with its unit, where a line is too long to sit in the signature."""

from __future__ import annotations

DETAIL = (
    "compact (default): ids, titles, the verdict and one line of why per memory, quoted from it; full: every "
    "field (summaries, scores, services, dates, the arms that found each)."
)
STATUS = "hypothesis while you investigate, corroborated once evidence confirms it, refuted when ruled out."
OUTCOME = "What the runbook did: recommended, executed, succeeded or failed."
INCIDENT_OR_ALERT = (
    "The incident it ran on (or the alert's id when no incident was opened): one result per (incident, runbook)."
)
TTM = "Time to mitigate, in seconds, from the start of the incident to the symptom gone."
CONTENT_TYPE = "What you are writing (status-update, post-mortem, customer-notice...): its learned rules join."
TOPIC = "A sentence about the problem: memories recalled about it are added in a separate block."
TRIAGE_SUMMARY = "What fired, in a sentence. Required unless alert_id is given."
TRIAGE_ALERT_ID = "The id of an alert Grandbo received, instead of summary. Required unless summary is given."
TITLE = (
    "The incident's title: what is wrong, in a line. Required unless from_alerts is given (then: the first alert's)."
)
FROM_ALERTS = (
    "Ids of alerts Grandbo received (an alert group's alerts): the incident takes its services, severity, start "
    "and alerts from them (leave those out); a group all of whose alerts are named is marked opened."
)
SERVICES = "The affected services (catalog names), the first the most affected."
SEVERITY = "sev1..sev5, P1..P5 or critical..info."
SYMPTOMS = "What is seen, one line each."
ALERTS = "Ids of the alerts behind it."
STARTED_AT = "When it started (ISO 8601 with a timezone); now when left out."
INCIDENT_ID = "The incident's id (open_incident and list_incidents give it)."
NEW_INCIDENT_ID = "An id of your own (letters, digits, . _ : @ -); generated when left out."
LIST_STATUS = "open (default), closed, or null for both."
LIMIT = "How many incidents, newest first (1-100); fewer when they would pass 1 MiB (next_cursor gives the rest)."
CURSOR = "The next_cursor of the previous answer, as it came, for the incidents after it; none for the first."
RESOLUTION = "What fixed it, in a sentence or two."
RUNBOOK_USED = "The id of the runbook that was run, if one was."
SUCCEEDED = "Whether the runbook worked; its record moves once per incident (closed again with the other: corrected)."
POSTMORTEM = "The post-mortem's text (Markdown), kept as memory."
MEMORY_ID = "The memory's id, as query_org_memory or triage_alert cited it."
HISTORY = "With the events that shaped it (remembered, corrected, retired), oldest first."
RUNBOOK_ID = "The runbook's id, as triage_alert or query_org_memory cited it."
RUNBOOK_SERVICE = "The record for this service only; all services when left out."
CHANGE_SERVICE = "Only changes of this service (a catalog name or an alias), and none of its dependencies."
CHANGE_KIND = "Only this kind: deploy, rollback, config, flag, infra or other."
SINCE = "Only changes that took effect at or after this time (ISO 8601 with a timezone)."
UNTIL = "Only changes that took effect at or before this time (ISO 8601 with a timezone)."
CHANGES_LIMIT = "How many changes, the latest first (1-100)."
