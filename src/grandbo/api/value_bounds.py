"""How many JSON values, and how deep, a request body to the API may hold, checked before anything parses it.

FastAPI parses and checks a body on the event loop every organization's requests share, and a delivery parses on a
worker thread, where parsing holds the GIL all the same: a 1 MiB body of ~330,000 small values (a list of tags, of
services, a tool's list argument) made every other organization's requests wait 140-210 ms, once for each such
body one key sent (probe 27, as MCP's messages did). Each route's bound is far past the most its largest legitimate
body holds, and a body over it (or nested over MAX_DEPTH) is refused 413 before it is parsed, saying by how much."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from fastapi.routing import APIRoute

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

# Every route that takes a JSON body, by its method and path template, and the most values its body may hold: a
# route's bound is looked up by the route a request goes to (`RouteBounds`), and a route added without one here
# is found by tests/test_rest_large_bodies.py (until then its body is held to MAX_VALUES, as a body sent to a route
# that takes none is).
BOUNDS: dict[tuple[str, str], int] = {
    ("POST", "/v1/memories"): MEMORY_VALUES,
    ("PATCH", "/v1/memories/{entry_id}"): MEMORY_VALUES,
    ("POST", "/v1/webhooks/{source}"): WEBHOOK_VALUES,
    ("POST", "/v1/changes/{source}"): CHANGE_VALUES,
    ("PUT", "/v1/catalog"): CATALOG_VALUES,
    **dict.fromkeys([
        ("POST", "/v1/erasures"), ("POST", "/v1/recall"), ("POST", "/v1/triage"), ("POST", "/v1/incidents"),
        ("POST", "/v1/incidents/{incident_id}/findings"), ("POST", "/v1/incidents/{incident_id}/close"),
        ("PATCH", "/v1/incidents/{incident_id}/findings/{finding_id}"), ("POST", "/v1/runbooks"),
        ("POST", "/v1/runbooks/{runbook_id}/outcomes"), ("POST", "/v1/runbooks/{runbook_id}/feedback"),
        ("POST", "/v1/signals"), ("PUT", "/v1/settings/rerank"), ("PUT", "/v1/settings/language"),
        ("PATCH", "/v1/profile"), ("PATCH", "/v1/notes/{note_id}"), ("POST", "/v1/keys"),
        ("PATCH", "/v1/settings/redaction"), ("POST", "/v1/webhooks/{source}/secrets"), ("POST", "/v1/tools/{name}"),
        ("POST", "/v1/alert-groups/{group_id}/open"),
    ], MAX_VALUES),
}  # fmt: skip
# A delivery's reader (`ingest`) refuses a payload nested too deeply itself, as the sender's malformed payload
DELIVERIES = {("POST", "/v1/webhooks/{source}"), ("POST", "/v1/changes/{source}")}


class Bound(NamedTuple):
    """What a route's body may hold: `values` JSON values at most, nested at most MAX_DEPTH deep when `depth`."""

    values: int
    depth: bool


_ANY_OTHER = Bound(MAX_VALUES, depth=True)  # a route that takes no body, or a request no route takes


class RouteBounds:
    """The bound of each of `routes` (the API's), found for a request as the app finds its route: the first whose
    method and path template match it. Looked up once per route, from `BOUNDS`."""

    def __init__(self, routes: Iterable[APIRoute]) -> None:
        self._routes = [
            (method, route.path_regex, Bound(BOUNDS[key], key not in DELIVERIES) if key in BOUNDS else _ANY_OTHER)
            for route in routes
            for method in sorted(route.methods or ())
            for key in [(method, route.path)]
        ]

    def of(self, method: str, path: str) -> Bound:
        """The bound of the body of a request sent with `method` to `path`."""
        return next((bound for each, pattern, bound in self._routes if each == method and pattern.match(path)),
                    _ANY_OTHER)  # fmt: skip


def oversized(body: bytes, bound: Bound, method: str, path: str) -> dict[str, Any] | None:
    """The refusal (413, in the API's error shape) of a JSON body (UTF-8) sent with `method` to `path` that holds
    more values than its route's `bound` takes, or is nested deeper; None for one to hand on. Counted unparsed
    (`grandbo.jsontext`): a few ms a MiB."""
    count = values_at_least(body, bound.values)
    if count > bound.values:
        said = f"holds at least {count:,} JSON values, more than {method} {path} takes ({bound.values:,})"
    elif bound.depth and nested_deeper(body, MAX_DEPTH):
        count, said = 0, f"nests arrays and objects more than {MAX_DEPTH} deep, more than {method} {path} takes"
    else:
        return None
    error = PayloadTooLargeError(
        f"The request body {said}. It was not parsed.",
        detail={"values_at_least": count, "max_values": bound.values, "max_depth": MAX_DEPTH},
    )
    refused = error.to_dict()
    refused["error"]["remedy"] = (
        "Split it: send the items in several requests of fewer values each (a catalog in parts without `replace`, "
        "memories and changes one batch at a time), each list within its field's limit (/openapi.json)."
    )
    return refused
