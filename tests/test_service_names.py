"""Service names that look like another's (probe 20b, LOW): a Cyrillic letter in a Latin word, a zero-width space,
fullwidth letters. Every face keeps services by one rule (`values.service_names`): NFKC, lower case, and a look-alike
refused with a 422 that names it, so a memory tagged so cannot silently miss the `services` filter and the topology."""

from __future__ import annotations

import re

import anyio
import pytest

from grandbo.errors import InvalidInputError
from grandbo.ports import DocumentWrite
from grandbo.tiers.operations import SERVICES
from tests.serving import serving
from tests.test_mcp import http_client, session

CYRILLIC = "\u0441heckout-api"  # its first letter is Cyrillic es
ZERO_WIDTH = "checkout\u200b-api"
FULLWIDTH = "\uff43\uff48\uff45\uff43\uff4b\uff4f\uff55\uff54-api"  # ｃｈｅｃｋｏｕｔ-api


@pytest.mark.parametrize(
    ("name", "said"),
    [
        (CYRILLIC, "mixes Cyrillic and Latin letters in one word"),
        (ZERO_WIDTH, "holds an invisible character (U+200B, ZERO WIDTH SPACE): remove it"),
        ("auth\u00adservice", "holds an invisible character (U+00AD, SOFT HYPHEN)"),
        ("\u03b1uth-service", "mixes Greek and Latin letters in one word"),
    ],
)
def test_a_look_alike_service_is_refused_on_rest_naming_it_and_nothing_is_stored(grandbo, name, said):
    """`POST /v1/memories` stored them verbatim (201), while `checkout-api` was the catalog's name."""
    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("write")
    with serving(grandbo) as served, served.client(key) as client:
        refused = client.post("/v1/memories", json={"title": "Checkout pool exhausted", "services": [name]})
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert said in error["message"] and repr(name) in error["message"]
        assert error["detail"]["errors"][0]["field"] == "services"
    assert memory.entries() == []


def test_a_fullwidth_service_is_kept_as_its_plain_name_and_found_by_either(grandbo):
    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("write")
    with serving(grandbo) as served, served.client(key) as client:
        stored = client.post("/v1/memories", json={"title": "Checkout pool exhausted", "services": [FULLWIDTH]})
        assert stored.status_code == 201 and stored.json()["services"] == ["checkout-api"]
        for asked in ("checkout-api", FULLWIDTH, "CHECKOUT-API"):
            listed = client.get("/v1/memories", params={"service": asked}).json()["items"]
            assert [entry["id"] for entry in listed] == [stored.json()["id"]], asked
    kept = memory.remember(
        {"title": "Payments in Russian", "services": ["\u043f\u043b\u0430\u0442\u0435\u0436\u0438-api"]}
    )
    assert kept.services == ["\u043f\u043b\u0430\u0442\u0435\u0436\u0438-api"]  # two words, each of one script


def test_the_catalog_incidents_and_findings_refuse_the_same_names_by_the_same_rule(grandbo):
    memory = grandbo.org("acme", create=True)
    with pytest.raises(InvalidInputError, match="service name '\u0441heckout-api' mixes Cyrillic and Latin"):
        memory.catalog.import_text(f"services:\n  - name: checkout-api\n  - name: {CYRILLIC}\n")
    with pytest.raises(
        InvalidInputError, match=re.escape("dependency 'checkout\\u200b-api' holds an invisible character")
    ):
        memory.catalog.import_text(f'{{"services": [{{"name": "web", "depends_on": ["{ZERO_WIDTH}"]}}]}}')
    (service,) = memory.catalog.import_text(f'{{"services": [{{"name": "{FULLWIDTH}"}}]}}')
    assert service.name == "checkout-api"
    with pytest.raises(InvalidInputError, match="mixes Cyrillic and Latin"):
        memory.incidents.open("Checkout down", services=[CYRILLIC])
    incident = memory.incidents.open("Checkout down", services=[FULLWIDTH])
    assert incident.services == ["checkout-api"]
    with pytest.raises(InvalidInputError, match="holds an invisible character"):
        memory.incidents.add_finding(incident.id, "pool exhausted", services=[ZERO_WIDTH])


def test_an_mcp_tool_refuses_a_look_alike_service_saying_why(grandbo):
    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("write")
    with serving(grandbo) as served:
        refused = anyio.run(
            session, http_client(served.url, key),
            lambda client: client.call_tool("open_incident", {"title": "Checkout down", "services": [CYRILLIC]}),
        )  # fmt: skip
    assert refused.is_error and "mixes Cyrillic and Latin letters in one word" in refused.content[0].text
    assert memory.incidents.find() == []


def test_a_catalog_stored_before_the_rule_is_still_read(grandbo):
    """The rule holds for what is written: a service document an earlier release kept with a look-alike name is
    read (normalised), never made unreadable."""
    memory = grandbo.org("acme", create=True)
    memory.catalog.documents.put(
        [DocumentWrite(SERVICES, name, {"name": name, "depends_on": [ZERO_WIDTH]}, "service.put", ref=name)
         for name in (CYRILLIC, FULLWIDTH)], "test.older",
    )  # fmt: skip
    assert sorted(memory.catalog.topology().services) == sorted([CYRILLIC, "checkout-api"])
