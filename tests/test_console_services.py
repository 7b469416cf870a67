"""The service fields of the console's filters suggest the catalog's services only while it is small: each memory
and triage page drew every name of an org's catalog as an option, 1.5 MB and 83 ms of the process's one
interpreter lock a view at 10,000 services, which every other org's requests waited behind (probe 29)."""

from __future__ import annotations

import re

import pytest

from grandbo.tiers.topology import Service
from grandbo.web.forms import SERVICES_SUGGESTED
from tests.serving import serving
from tests.test_console_http import signed_in

pytestmark = pytest.mark.embedded_default  # Postgres: in the slow suite (tests/conftest.py)


def _suggested(page: str, datalist: str) -> list[str]:
    found = re.search(rf'<datalist id="{datalist}">(.*?)</datalist>', page, re.S)
    assert found is not None, page[:500]
    return re.findall(r'<option value="([^"]*)">', found.group(1))


@pytest.mark.parametrize("services", [3, SERVICES_SUGGESTED, SERVICES_SUGGESTED + 1])
def test_the_service_filters_suggest_a_small_catalog_whole_and_a_large_one_not_at_all(grandbo, services):
    memory = grandbo.org("acme", create=True)
    names = [f"svc-{n:05d}" for n in range(services)]
    memory.catalog.put([Service(name=name) for name in names], actor="test")
    _, key = memory.keys.create("read")
    with serving(grandbo) as served:
        client = signed_in(served, key)
        shown = {"memory": _suggested(client.get("/ui/memory").text, "known-services"),
                 "triage": _suggested(client.get("/ui/triage").text, "queue-services")}  # fmt: skip
        filtered = client.get("/ui/memory", params={"service": names[-1]})
        client.close()
    wanted = names if services <= SERVICES_SUGGESTED else []
    assert shown == {"memory": wanted, "triage": wanted}
    assert filtered.status_code == 200 and f'value="{names[-1]}"' in filtered.text  # any name typed is still taken
