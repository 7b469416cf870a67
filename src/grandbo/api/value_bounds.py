"""How many JSON values, and how deep, a request body to the API may hold, checked before anything parses it.

FastAPI parses and checks a body on the event loop every organization's requests share, and a delivery parses on a
worker thread, where parsing holds the GIL all the same: a 1 MiB body of ~330,000 small values (a list of tags, of
services, a tool's list argument) made every other organization's requests wait 140-210 ms, once for each such
body one key sent (probe 27, as MCP's messages did). Each route's bound is far past the most its largest legitimate
body holds, and a body over it (or nested over MAX_DEPTH) is refused 413 before it is parsed, saying by how much."""

from __future__ import annotations

from typing import Any

from grandbo.errors import PayloadTooLargeError
from grandbo.ingest.adapters import MAX_ALERTS
from grandbo.ingest.changes import MAX_CHANGES
from grandbo.jsontext import nested_deeper, values_at_least
from grandbo.values import MAX_META_BYTES

# A body of any other route holds a few hundred values at most (an incident's 100 symptoms, 100 alerts, 50 services;
# a runbook's 200 steps; a triage's 100 labels; a tool's arguments, bounded so over MCP), and nests a handful deep
MAX_VALUES, MAX_DEPTH = 10_000, 64
# An entry's meta is at most 64 KiB as `json.dumps` writes it, ", " between values: 21,846 of them, with its tags
# (100), services (50) and a dozen fields
MEMORY_VALUES = MAX_META_BYTES // 3 + 3_000
# An Alertmanager delivery of MAX_ALERTS alerts, each of ~20 fields, 40 labels and 10 annotations (~120 values)
WEBHOOK_VALUES = 200 * MAX_ALERTS
# MAX_CHANGES generic changes of 7 fields each (15 values); a GitHub or Argo CD delivery is one change of a few hundred
CHANGE_VALUES = 20 * MAX_CHANGES
# A catalog's names are its densest values, 4 bytes the shortest (`"a",`): no catalog within its 1 MiB
# (`api.bodies.MAX_BODY`) holds more
CATALOG_VALUES = (1 << 20) // 4

_BOUNDS = {
    ("POST", "memories", None): MEMORY_VALUES,
    ("PATCH", "memories", "*"): MEMORY_VALUES,
    ("POST", "webhooks", "*"): WEBHOOK_VALUES,
    ("POST", "changes", "*"): CHANGE_VALUES,
    ("PUT", "catalog", None): CATALOG_VALUES,
}
# A delivery's reader (`ingest`) refuses a payload nested too deeply itself, as the sender's malformed payload
_DELIVERIES = {("POST", "webhooks", "*"), ("POST", "changes", "*")}


def _shape(method: str, path: str) -> tuple[str, str, str | None]:
    parts = path.removeprefix("/v1/").split("/")
    return method, parts[0], None if len(parts) == 1 else "*" if len(parts) == 2 else "**"


def values_bound(method: str, path: str) -> int:
    """The most JSON values a body sent with `method` to `path` (under /v1/) may hold."""
    return _BOUNDS.get(_shape(method, path), MAX_VALUES)


def oversized(body: bytes, method: str, path: str) -> dict[str, Any] | None:
    """The refusal (413, in the API's error shape) of a JSON body (UTF-8) holding more values than `method` to
    `path` takes, or (but to a delivery) nested more than MAX_DEPTH deep; None for one to hand on. Counted unparsed
    (`grandbo.jsontext`): a few ms a MiB."""
    bound = values_bound(method, path)
    count = values_at_least(body, bound)
    if count > bound:
        said = f"holds at least {count:,} JSON values, more than {method} {path} takes ({bound:,})"
    elif _shape(method, path) not in _DELIVERIES and nested_deeper(body, MAX_DEPTH):
        count, said = 0, f"nests arrays and objects more than {MAX_DEPTH} deep, more than {method} {path} takes"
    else:
        return None
    error = PayloadTooLargeError(
        f"The request body {said}. It was not parsed.",
        detail={"values_at_least": count, "max_values": bound, "max_depth": MAX_DEPTH},
    )
    refused = error.to_dict()
    refused["error"]["remedy"] = (
        "Split it: send the items in several requests of fewer values each (a catalog in parts without `replace`, "
        "memories and changes one batch at a time), each list within its field's limit (/openapi.json)."
    )
    return refused
