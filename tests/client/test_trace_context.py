"""The client sends the caller's trace context: a ``traceparent`` the caller gives, else the
current OpenTelemetry span's, and nothing outside a span."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider

from agent_ledger_client.protocol import LedgerProtocol, Request, Send
from agent_ledger_client.surface import http_arguments

GIVEN = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_given_traceparent_goes_with_the_decision_request() -> None:
    flow = LedgerProtocol().call("run-1", "create_order", {}, execute=dict, traceparent=GIVEN)
    action = next(flow)
    assert isinstance(action, Send) and action.request.path == "/calls"
    assert http_arguments(action.request)["headers"]["traceparent"] == GIVEN


def test_the_callers_current_span_goes_with_every_request() -> None:
    tracer = TracerProvider().get_tracer("agent")
    with tracer.start_as_current_span("invoke_agent") as span:
        headers = http_arguments(Request("POST", "/calls"))["headers"]
    context = span.get_span_context()
    assert headers["traceparent"].startswith(f"00-{context.trace_id:032x}-{context.span_id:016x}-")


def test_outside_a_span_no_trace_context_is_sent() -> None:
    assert "traceparent" not in http_arguments(Request("POST", "/calls"))["headers"]
