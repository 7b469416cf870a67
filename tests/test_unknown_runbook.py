"""An outcome for a runbook the organization has no trace of (a typo) is refused, naming close ids, on every
interface; runbooks an org's memories or incidents cite, without an entry of their own, still take outcomes."""

from __future__ import annotations

import anyio
import pytest

from grandbo.errors import InvalidInputError, NotFoundError
from tests.serving import serving
from tests.test_mcp import http_client, session


@pytest.fixture
def acme(grandbo):
    memory = grandbo.org("acme", create=True)
    memory.runbooks.add("RB-REDIS-FLUSH", "Flush the session cache", ["flush it"])
    memory.remember({"id": "INC-7-F1", "title": "pool exhausted", "kind": "finding",
                     "meta": {"runbook_id": "RB-WIKI-POOL"}})  # fmt: skip
    return memory


def test_a_mistyped_runbook_is_refused_naming_the_close_one_and_nothing_is_recorded(acme):
    with pytest.raises(NotFoundError, match="No runbook 'RB-REDIS-FLSH'") as refused:
        acme.ledger.record("RB-REDIS-FLSH", "succeeded")
    assert "Did you mean 'RB-REDIS-FLUSH'?" in refused.value.message
    assert refused.value.detail["close"] == ["RB-REDIS-FLUSH"]
    with pytest.raises(InvalidInputError, match="is a finding, not a runbook"):
        acme.ledger.record("INC-7-F1", "succeeded")
    assert acme.ledger.every_outcome() == []


def test_runbooks_cited_by_memories_or_incidents_or_with_outcomes_take_outcomes(acme):
    acme.ledger.record("RB-REDIS-FLUSH", "succeeded")
    acme.ledger.record("RB-WIKI-POOL", "failed")  # a runbook kept elsewhere that a finding names
    acme.incidents.open("checkout down", incident_id="INC-8")
    acme.incidents.close("INC-8", runbook_used="RB-ELSEWHERE", succeeded=True)  # the incident names it
    acme.ledger.record("RB-ELSEWHERE", "succeeded")  # and from then on it is known
    assert {o.runbook_id for o in acme.ledger.every_outcome()} == {"RB-REDIS-FLUSH", "RB-WIKI-POOL", "RB-ELSEWHERE"}


def test_rest_and_mcp_refuse_the_typo_with_the_remedy(grandbo, acme):
    _, key = acme.keys.create("write")
    with serving(grandbo) as served:
        with served.client(key) as client:
            response = client.post("/v1/runbooks/RB-REDIS-FLSH/outcomes", json={"kind": "succeeded"})
        answer = anyio.run(session, http_client(served.url, key), lambda client: client.call_tool(
            "report_outcome", {"runbook_id": "RB-REDIS-FLSH", "outcome": "succeeded"}))  # fmt: skip
    assert response.status_code == 404 and response.json()["error"]["detail"]["close"] == ["RB-REDIS-FLUSH"]
    assert answer.is_error and "Did you mean 'RB-REDIS-FLUSH'?" in answer.content[0].text
    assert acme.ledger.every_outcome() == []


def test_the_cli_refuses_the_typo_with_the_remedy(cli):
    cli("runbook", "add", "RB-DNS", "--title", "Flush DNS", "--step", "flush")
    refused = cli("outcome", "RB-DSN", "--kind", "succeeded", code=2)
    assert "No runbook 'RB-DSN'" in refused.stderr and "Did you mean 'RB-DNS'?" in refused.stderr
    cli("outcome", "RB-DNS", "--kind", "succeeded")
