"""Inputs a hostile probe found answered with a 500 and a traceback (each test failed on the code it was found on):
times at the calendar's edge on the change routes, a cursor holding a lone surrogate, odd digits in the
console's offset and in a severity."""

from __future__ import annotations

import base64
import json
import re

import httpx
import pytest

from grandbo.model import Severity
from tests.serving import serving

pytestmark = pytest.mark.embedded_default  # Postgres: in the slow suite (tests/conftest.py)

EDGES = ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"]  # valid ISO 8601, a day off the calendar in UTC


@pytest.fixture
def keyed(grandbo):
    acme = grandbo.org("acme", create=True)
    acme.remember({"id": "KNOWN-1", "title": "checkout-api pool exhausted after a deploy"})
    return acme.keys.create("admin", name="admin")[1]


def _cursor(at: str, item: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([at, item]).encode()).decode().rstrip("=")


def _refused(response: httpx.Response) -> None:
    assert response.status_code == 422, response.text
    assert response.json()["error"]["type"] == "invalid_input"


@pytest.mark.parametrize("at", EDGES)
def test_a_change_time_a_day_off_the_calendar_in_utc_is_a_422_not_a_500(grandbo, keyed, backend, at):
    """`tiers.changes.utc` converts with `astimezone(UTC)`, which overflows for these times (OverflowError: date
    value out of range): every change route answered 500 where incidents and memories refuse them with a 422."""
    change = {"id": "c1", "service": "checkout-api", "kind": "deploy", "summary": "deployed v2", "at": at}
    with serving(grandbo) as served, served.client(keyed) as client:
        _refused(client.post("/v1/changes/generic", json=change))
        _refused(client.get("/v1/changes", params={"since": at}))
        _refused(client.get("/v1/changes", params={"until": at}))
        _refused(client.get("/v1/changes", params={"cursor": _cursor(at, "generic:c1")}))


@pytest.mark.parametrize("path", ["/v1/alerts", "/v1/changes", "/v1/alert-groups"])
def test_a_cursor_holding_a_lone_surrogate_is_a_422_not_a_500(grandbo, keyed, backend, path):
    """The door (`api.clean`) reads the query string, where the cursor is base64: the surrogate is only inside it,
    and reached the store (UnicodeEncodeError on both backends)."""
    cursor = base64.urlsafe_b64encode(b'["2026-12-05T00:00:00Z","\\ud800"]').decode()
    with serving(grandbo) as served, served.client(keyed) as client:
        _refused(client.get(path, params={"cursor": cursor}))


@pytest.mark.parametrize("path", ["/v1/memories", "/v1/runbooks", "/v1/alerts", "/v1/changes", "/v1/alert-groups"])
@pytest.mark.parametrize("item", ["KNOWN\x00-1", "\ud800"])
def test_a_cursor_holding_a_nul_or_a_lone_surrogate_is_a_422_on_every_list(grandbo, keyed, backend, path, item):
    """Memories and runbooks select their page in the store now, cursor and all: a NUL in the cursor's id reached
    Postgres, which refuses one in a query (a 500 there, where the page sorted in Python had answered 200)."""
    with serving(grandbo) as served, served.client(keyed) as client:
        _refused(client.get(path, params={"cursor": _cursor("2026-12-05T00:00:00Z", item)}))


def _signed_in(url: str, key: str) -> httpx.Client:
    client = httpx.Client(base_url=url, timeout=30)
    token = re.search(r'name="csrf" value="([^"]+)"', client.get("/ui/sign-in").text).group(1)
    assert client.post("/ui/sign-in", data={"key": key, "csrf": token, "next": "/ui/memory"}).status_code == 303
    return client


@pytest.mark.parametrize("offset", ["\u00b2", "9" * 5000])
def test_the_console_listing_takes_any_offset_without_failing(grandbo, keyed, offset):
    """`str.isdigit` holds for a superscript two, and for 5,000 nines, neither of which `int` reads: a 500 page."""
    with serving(grandbo) as served:
        console = _signed_in(served.url, keyed)
        try:
            assert console.get("/ui/memory", params={"offset": offset}).status_code == 200
        finally:
            console.close()


@pytest.mark.parametrize("severity", ["sev\u00b2", "P" + "9" * 5000])
def test_a_severity_in_odd_digits_is_refused_in_words_not_pythons(grandbo, keyed, severity):
    """`isdigit` holds for a superscript two and for 5,000 nines; `int` refused them in Python's own words
    ("invalid literal for int() with base 10", "use sys.set_int_max_str_digits()") inside the 422."""
    memory = {"title": "checkout-api pool exhausted after a deploy", "severity": severity}
    with serving(grandbo) as served, served.client(keyed) as client:
        answer = client.post("/v1/memories", json=memory)
    _refused(answer)
    message = answer.json()["error"]["message"]
    assert "sev1..sev5" in message and "int()" not in message and "sys." not in message, message


@pytest.mark.parametrize(("given", "read"), [("P01", "sev1"), ("sev05", "sev5"), ("03", "sev3"), (2, "sev2")])
def test_a_severity_with_a_leading_zero_reads_as_it_did(given, read):
    """The odd-digits fix compared the digits with "1".."5" exactly, and P01 or sev05, read before, was refused."""
    assert Severity.parse(given) == read


@pytest.mark.parametrize("given", ["0", "P0", "sev6", "p00", "0" * 40 + "9"])
def test_a_severity_outside_one_to_five_is_refused_with_leading_zeros_too(given):
    with pytest.raises(ValueError, match=r"sev1\.\.sev5"):
        Severity.parse(given)
