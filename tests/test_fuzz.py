"""schemathesis against the served OpenAPI schema: no 5xx, every response matches its declared schema.

40 examples per operation in ``make test``; ``make fuzz`` runs 1,000 (``TEXTBENTO_FUZZ_EXAMPLES``).
"""

import os
from collections import Counter

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance


@pytest.fixture(scope="module")
def api_schema(embed_url):
    # textbento's routes and TEI's (BentoML's own probes and metrics are not ours to fuzz).
    return schemathesis.openapi.from_url(f"{embed_url}/docs.json").include(
        path_regex=r"^/(v1|api)/|^/(embed|embed_all|embed_sparse|predict|rerank|similarity|tokenize|info)?$"
    )


schema = schemathesis.pytest.from_fixture("api_schema")
calls: Counter = Counter()


@pytest.fixture(scope="module", autouse=True)
def report_calls(request):
    """Prints how many requests each operation got (hypothesis' statistics show only one of them)."""
    yield
    with request.config.pluginmanager.get_plugin("capturemanager").global_and_fixture_disabled():
        print("\nrequests per operation: " + ", ".join(f"{name} {count}" for name, count in sorted(calls.items())))


@schema.parametrize()
@settings(max_examples=int(os.environ.get("TEXTBENTO_FUZZ_EXAMPLES", "40")), deadline=None, suppress_health_check=list(HealthCheck))
def test_api_never_errors_and_matches_its_schema(case):
    calls[f"{case.operation.method.upper()} {case.operation.path}"] += 1
    case.call_and_validate(checks=[not_a_server_error, response_schema_conformance, status_code_conformance])
