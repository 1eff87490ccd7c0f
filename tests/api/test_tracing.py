"""Spans of API decisions and reconciliation look-ups, caught by the SDK's in-memory exporter:
GenAI attribute names, the ledger's own attributes, the caller's trace, and never the key or
the input. (tests/api/test_tracing_export.py sends them over OTLP/HTTP from a real server.)"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from ledger import tracing
from ledger.models import IdempotencyRecord
from ledger.records import Outcome, complete_execution
from reconcile.models import DownstreamAdapter
from reconcile.services import reconcile_record
from tests.api.call_outcomes import drive, prepare
from tests.factories import make_tool, reserve
from tests.processes import ROOT, VENV_BIN, free_port

pytestmark = pytest.mark.django_db

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


def only(spans: InMemorySpanExporter) -> ReadableSpan:
    [span] = spans.get_finished_spans()
    return span


def test_a_call_with_a_traceparent_is_a_span_in_the_callers_trace(api, spans) -> None:
    api.start_run()
    response = api.client.post(
        "/api/v1/calls",
        data=json.dumps(
            {
                "run_id": "run-1",
                "step_id": "call_abc123",
                "tool": "charge_customer",
                "input": {"customer": "cus_42", "card": "4242 4242 4242 4242"},
                "business_object_id": "invoice-7",
            }
        ),
        content_type="application/json",
        headers={"Authorization": f"Bearer {api.token}", "traceparent": TRACEPARENT},
        secure=True,
    )
    assert response.status_code == 200
    body = response.json()
    span = only(spans)
    assert span.name == "execute_tool charge_customer"
    assert span.kind is SpanKind.SERVER
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert span.parent is not None and format(span.parent.span_id, "016x") == PARENT_ID
    assert dict(span.attributes) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "charge_customer",
        "gen_ai.tool.call.id": "call_abc123",
        "agent_ledger.api.operation": "record",
        "agent_ledger.call.id": body["call_id"],
        "agent_ledger.decision": "execute",
        "agent_ledger.entry.status": "started",
        "agent_ledger.idempotency": "non_idempotent",
        "agent_ledger.replay_policy": "never",
        "agent_ledger.record.state": "executing",
        "agent_ledger.key.sha256": hashlib.sha256(body["idempotency_key"].encode()).hexdigest(),
    }
    exported = json.dumps(dict(span.attributes))
    assert body["idempotency_key"] not in exported
    assert "cus_42" not in exported and "4242" not in exported


def test_without_a_traceparent_the_decision_starts_its_own_trace(api, spans) -> None:
    api.start_run()
    assert api.call("create_order", {"cart": 1}).status_code == 200
    span = only(spans)
    assert span.parent is None and span.name == "execute_tool create_order"


def test_a_duplicate_and_a_completion_are_spans_with_their_decisions(api, spans) -> None:
    api.start_run()
    first = api.call("create_order", {"cart": 1}, business_object_id="c1").json()
    api.post(
        f"/calls/{first['call_id']}/complete",
        {
            "fencing_token": first["lease"]["fencing_token"],
            "outcome": "succeeded",
            "result": {"id": "o1"},
        },
    )
    api.call("create_order", {"cart": 1}, business_object_id="c1")
    record, complete, duplicate = spans.get_finished_spans()
    assert complete.attributes["agent_ledger.api.operation"] == "complete"
    assert complete.attributes["agent_ledger.record.state"] == "succeeded"
    assert duplicate.attributes["agent_ledger.decision"] == "recorded_result"
    assert (
        duplicate.attributes["agent_ledger.key.sha256"]
        == (record.attributes["agent_ledger.key.sha256"])
    )


def test_each_failed_uncertain_refused_or_conflicting_call_is_an_error_span(api, spans) -> None:
    """``error.type`` and an error status on every call that did not go ahead or succeed;
    neither on a go-ahead, a recorded success, a wait or a pause for a human."""

    def post(path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
        return api.client.post(
            f"/api/v1{path}",
            data=json.dumps(body),
            content_type="application/json",
            headers={"Authorization": f"Bearer {api.token}", **(headers or {})},
            secure=True,
        )

    prepare(post)
    sent = drive(post)
    by_trace = {span.context.trace_id: span for span in spans.get_finished_spans()}
    seen = {
        t.what: (
            by_trace[t.trace_id].attributes.get("error.type"),
            by_trace[t.trace_id].status.status_code,
        )
        for t in sent
    }
    assert seen == {
        t.what: (t.error_type, StatusCode.ERROR if t.error_type else StatusCode.UNSET) for t in sent
    }


@pytest.fixture
def downstream() -> Iterator[dict[str, Any]]:
    """A downstream that has the order, and remembers the headers it was asked with."""
    seen: dict[str, Any] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen["traceparent"] = self.headers.get("traceparent")
            body = json.dumps({"id": "o1"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    seen["url"] = f"http://127.0.0.1:{server.server_port}"
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.usefixtures("private_downstreams")
def test_a_lookup_is_a_span_and_its_context_goes_downstream(tenant, spans, downstream) -> None:
    tool = make_tool(tenant, "create_order")
    DownstreamAdapter.objects.create(
        tenant=tenant,
        tool=tool,
        url_template=downstream["url"] + "/orders/{key}",
        found_statuses=[200],
        not_found_statuses=[404],
    )
    record = reserve(tenant, tool, key="agent:acme:u1:run-1:create_order:cart-1").record
    complete_execution(record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="rt")
    assert reconcile_record(record.pk) == "succeeded"
    span = only(spans)
    assert span.name == "execute_tool create_order" and span.kind is SpanKind.INTERNAL
    assert span.attributes["gen_ai.operation.name"] == "execute_tool"
    assert span.attributes["agent_ledger.api.operation"] == "lookup"
    assert span.attributes["agent_ledger.lookup.outcome"] == "found"
    assert span.attributes["agent_ledger.record.state"] == "succeeded"
    assert span.attributes["agent_ledger.key.sha256"] == tracing.key_hash(record.key)
    assert record.key not in json.dumps(dict(span.attributes))
    trace_id, span_id = format(span.context.trace_id, "032x"), format(span.context.span_id, "016x")
    assert downstream["traceparent"].startswith(f"00-{trace_id}-{span_id}-")
    assert IdempotencyRecord.objects.get(pk=record.pk).state == "succeeded"
    assert "error.type" not in span.attributes and span.status.status_code is StatusCode.UNSET


@pytest.mark.usefixtures("private_downstreams")
def test_a_lookup_that_gets_no_answer_is_an_error_span(tenant, spans) -> None:
    tool = make_tool(tenant, "create_order")
    DownstreamAdapter.objects.create(
        tenant=tenant,
        tool=tool,
        url_template=f"http://127.0.0.1:{free_port()}/orders/{{key}}",  # nothing listens
        found_statuses=[200],
        not_found_statuses=[404],
    )
    record = reserve(tenant, tool, key="agent:acme:u1:run-1:create_order:cart-1").record
    complete_execution(record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="rt")
    reconcile_record(record.pk)
    span = only(spans)
    assert span.attributes["agent_ledger.lookup.outcome"] == "unreachable"
    assert span.attributes["error.type"] == "unreachable"
    assert span.status.status_code is StatusCode.ERROR


@pytest.mark.parametrize(
    ("environ", "exporting"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "ledger"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
        ({"OTEL_TRACES_EXPORTER": "console"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
    ],
)
def test_the_standard_variables_decide_whether_traces_are_exported(environ, exporting) -> None:
    assert tracing.exporting(environ) is exporting


def test_with_otel_unset_no_exporter_runs() -> None:
    """A process started as the web and worker processes are, with no OTEL_* variable: the
    API's no-op provider, no SDK loaded, no exporter thread."""
    probe = (
        "import sys, threading, django; django.setup(); from opentelemetry import trace; "
        "from ledger import tracing; "
        "print(type(trace.get_tracer_provider()).__name__, "
        "'opentelemetry.sdk' in sys.modules, 'opentelemetry.exporter' in sys.modules, "
        "sorted(t.name for t in threading.enumerate()))"
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environ["DJANGO_SETTINGS_MODULE"] = "console.settings"
    out = (
        subprocess.run(
            [str(VENV_BIN / "python"), "-c", probe],
            cwd=ROOT,
            env=environ,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    assert out == "ProxyTracerProvider False False ['MainThread']"
    assert sys.modules.get("opentelemetry.sdk") is not None  # this process: the test's own
