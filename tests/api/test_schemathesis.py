"""Property-based fuzzing of API v1 from its own OpenAPI document (Schemathesis).

Every operation gets generated requests, valid and invalid; every response must be a
documented status with a body matching the documented schema, and no request may cause a 5xx.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.core.parameters import ParameterLocation
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

from ledger.models import ApiToken, Tenant
from ledger.permissions import SERVICE_ACCOUNT_SCOPES

# The application itself, not console.wsgi: that module also freezes the importing process's
# objects for the garbage collector (console.startup), which is for servers, not for pytest.
application = get_wsgi_application()
schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", application)
# The API refuses NUL characters in strings (PostgreSQL cannot store them; the API description
# says so), so the fuzzer does not count them as valid data.
schema.config.generation.update(allow_x00=False)
# A body over the size limit is refused with 413 before it is read: a correct rejection.
rejections = schema.config.checks.negative_data_rejection
rejections.expected_statuses = [*rejections.expected_statuses, "413"]
# Bodies with rules beyond what JSON Schema can say (a shadow run names the live run it
# mirrors; a plan's shares rise step by step to 10000; a webhook URL is one Python can split;
# an approval policy names which calls it asks for, and compares like with like; key fields
# at an MCP import name tools the server lists):
# a schema-valid one may still be refused with 400 INVALID_INPUT, as tests/api/
# test_shadow_runs.py, test_rollouts_api.py, tests/test_outbound.py and
# tests/test_approval_policies.py check. Every other check
# still applies to them.
CROSS_FIELD_RULES = {
    "POST /api/v1/runs",
    "POST /api/v1/rollouts",
    "POST /api/v1/thresholds",
    "POST /api/v1/approval-policies",
    "POST /api/v1/tools/import-mcp",
}
# A call's write plan names a path inside the workspace (ledger/paths.py: relative, normalised,
# no control character) and its input has depth and string limits (settings): a schema-valid
# call may be refused with 422 for those, and for nothing else.
BEYOND_SCHEMA = {"POST /api/v1/calls": {"INVALID_WRITE_PLAN", "INPUT_TOO_LARGE"}}


@pytest.fixture
def bearer(db, settings) -> Iterator[str]:
    # The fuzzer's webhook URLs are schema-valid but name hosts that do not exist or resolve
    # to private addresses; where alerts may go is tested in tests/test_outbound.py.
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True
    # Called as a raw WSGI app, Django would close the test's connection after each request
    # (as it does between real requests); keep it open, as Django's own test client does.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    tenant = Tenant.objects.create(slug="fuzz", name="Fuzz")
    # Every scope a service account may hold, so the fuzzer reaches every operation.
    _token, plaintext = ApiToken.issue(
        tenant=tenant, name="fuzzer", scopes=sorted(SERVICE_ACCOUNT_SCOPES)
    )
    try:
        yield plaintext
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@pytest.mark.slow
@schema.parametrize()
@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)
def test_api_conforms_to_its_openapi_document(case: schemathesis.Case, bearer: str) -> None:
    label = case.operation.label
    beyond = label in CROSS_FIELD_RULES or label in BEYOND_SCHEMA
    excluded = [positive_data_acceptance] if beyond else []
    # A case whose headers are made invalid (its credentials left out) is sent as generated:
    # the token would make it valid again, and its refusal is what the case checks.
    headers = case.meta.components.get(ParameterLocation.HEADER) if case.meta else None
    invalid_headers = headers is not None and headers.mode is GenerationMode.NEGATIVE
    auth = {} if invalid_headers else {"Authorization": f"Bearer {bearer}"}
    response = case.call_and_validate(headers=auth, excluded_checks=excluded)
    if label in BEYOND_SCHEMA and response.status_code == 422:
        assert response.json()["code"] in BEYOND_SCHEMA[label], response.text
