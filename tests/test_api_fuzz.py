"""schemathesis fuzzes every route of the OpenAPI document against a real server: no 500s, ever.

The default suite runs a few dozen cases per route; `make test-all` (the slow marker) runs 300 per route.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from grandbo.config import Settings
from grandbo.service import Grandbo
from tests.serving import serving


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    home = tmp_path_factory.mktemp("fuzz")
    with Grandbo.init(Settings(home=home), embedding="deterministic") as grandbo:
        memory = grandbo.org("fuzz", create=True)
        memory.remember({"id": "M-1", "title": "redis eviction storm on auth-service", "body": "maxmemory reached"})
        memory.incidents.open("Logins slow", incident_id="INC-1")
        _, key = memory.keys.create("admin")
        with serving(grandbo) as served:
            yield served, key


def _check(case, key):
    response = case.call(headers={"Authorization": f"Bearer {key}"})
    assert response.status_code < 500, (case.method, case.formatted_path, response.text[:500])
    if response.status_code >= 400:
        assert set(response.json()["error"]) == {"type", "message", "remedy", "detail"}


def _fuzz(live, examples):
    """Every operation of the published OpenAPI document, `examples` generated cases each."""
    served, key = live
    schema = schemathesis.openapi.from_url(f"{served.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 30
    for operation in operations:

        @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(case=operation.as_strategy())
        def run(case):
            _check(case, key)

        run()


def test_no_route_answers_500_to_generated_input(live):
    _fuzz(live, 15)  # per operation, over 30 of them; the slow test below sends 300 each


@pytest.mark.slow
@pytest.mark.timeout(1800)  # 300 cases over 40-odd operations: about 4 minutes on a quiet machine, more when shared
def test_no_route_answers_500_to_hundreds_of_generated_inputs(live):
    _fuzz(live, 300)
