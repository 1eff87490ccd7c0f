"""Traces over the wire: a real server (gunicorn) configured only by OTEL_* variables exports
its spans over OTLP/HTTP to a receiver the test starts; a client call made inside the
caller's span yields server spans in the caller's trace, and every failing decision arrives
with ``error.type`` and an error status."""

from __future__ import annotations

import gzip
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Status
from opentelemetry.sdk.trace import TracerProvider

from agent_ledger_client import LedgerClient
from ledger.models import ApiToken, Tenant
from ledger.permissions import SERVICE_ACCOUNT_SCOPES
from tests import processes
from tests.api.call_outcomes import drive, prepare
from tests.processes import ROOT, VENV_BIN, free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


class OtlpReceiver:
    """An OTLP/HTTP trace receiver: keeps every span with its resource's attributes."""

    def __init__(self) -> None:
        self.spans: list[tuple[dict[str, Any], Any]] = []
        self.lock = threading.Lock()

    def received(self) -> list[tuple[dict[str, Any], Any]]:
        with self.lock:
            return list(self.spans)


@pytest.fixture
def otlp() -> Iterator[tuple[str, OtlpReceiver]]:
    receiver = OtlpReceiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            request = ExportTraceServiceRequest.FromString(body)
            with receiver.lock:
                for resource_spans in request.resource_spans:
                    resource = {
                        a.key: a.value.string_value for a in resource_spans.resource.attributes
                    }
                    for scope_spans in resource_spans.scope_spans:
                        receiver.spans.extend((resource, s) for s in scope_spans.spans)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200 if self.path == "/v1/traces" else 404)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", receiver
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def traced_server(otlp, tmp_path: Path) -> Iterator[str]:
    endpoint, _receiver = otlp
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environ.update(
        DATABASE_URL=processes.test_database_url(),
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
        OTEL_SERVICE_NAME="ledger-under-test",
        OTEL_BSP_SCHEDULE_DELAY="100",  # export within a tenth of a second, not five
    )
    log = tmp_path / "web.log"
    process = subprocess.Popen(
        [
            str(VENV_BIN / "gunicorn"),
            "console.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
            "--no-control-socket",
        ],
        cwd=ROOT,
        env=environ,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)


def test_a_client_call_in_the_callers_span_yields_server_spans_in_that_trace(
    otlp, traced_server
) -> None:
    _endpoint, receiver = otlp
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    _token, secret = ApiToken.issue(tenant=tenant, name="runtime")
    agent = TracerProvider().get_tracer("agent")  # the agent runtime's own tracing
    with LedgerClient(traced_server, secret) as ledger:
        run = ledger.start_run(user_id="u1")
        with agent.start_as_current_span("invoke_agent") as caller:
            observation = run.call(
                "create_order",
                {"cart": "c1"},
                business_object_id="c1",
                execute=lambda ctx: {"id": "o1"},
            )
    assert observation["ok"] is True
    trace_id = caller.get_span_context().trace_id.to_bytes(16, "big")
    deadline = time.monotonic() + 15
    while len([s for _, s in receiver.received() if s.trace_id == trace_id]) < 2:
        assert time.monotonic() < deadline, receiver.received()
        time.sleep(0.1)
    ours = [(resource, s) for resource, s in receiver.received() if s.trace_id == trace_id]
    assert {resource["service.name"] for resource, _ in ours} == {"ledger-under-test"}
    by_operation = {}
    for _, span in ours:
        attributes = {a.key: a.value for a in span.attributes}
        by_operation[attributes["agent_ledger.api.operation"].string_value] = (span, attributes)
    assert set(by_operation) == {"record", "complete"}
    record, attributes = by_operation["record"]
    assert record.name == "execute_tool create_order"
    assert record.parent_span_id == caller.get_span_context().span_id.to_bytes(8, "big")
    assert attributes["gen_ai.operation.name"].string_value == "execute_tool"
    assert attributes["gen_ai.tool.name"].string_value == "create_order"
    assert attributes["gen_ai.tool.call.id"].string_value.startswith("create_order:")
    assert attributes["agent_ledger.decision"].string_value == "execute"
    assert attributes["agent_ledger.idempotency"].string_value == "non_idempotent"
    assert len(attributes["agent_ledger.key.sha256"].string_value) == 64
    complete = by_operation["complete"][1]
    assert complete["agent_ledger.record.state"].string_value == "succeeded"


def test_the_receiver_gets_error_type_on_each_failing_decision(otlp, traced_server) -> None:
    """Failed, uncertain, refused and conflicting calls arrive with ``error.type`` (the
    ledger's code for how the call ended) and status ERROR; a go-ahead, a recorded success, a
    wait and a pause for a human arrive with neither."""
    _endpoint, receiver = otlp
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    _token, secret = ApiToken.issue(
        tenant=tenant, name="runtime", scopes=sorted(SERVICE_ACCOUNT_SCOPES)
    )
    with httpx.Client(
        base_url=f"{traced_server}/api/v1", headers={"Authorization": f"Bearer {secret}"}
    ) as http:

        def post(path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
            return http.post(path, json=body, headers=headers)

        prepare(post)
        sent = drive(post)
    wanted = {t.trace_id.to_bytes(16, "big") for t in sent}
    deadline = time.monotonic() + 15
    while not wanted <= {span.trace_id for _, span in receiver.received()}:
        assert time.monotonic() < deadline, receiver.received()
        time.sleep(0.1)
    by_trace = {span.trace_id: span for _, span in receiver.received()}
    seen = {}
    for t in sent:
        span = by_trace[t.trace_id.to_bytes(16, "big")]
        attributes = {a.key: a.value.string_value for a in span.attributes}
        seen[t.what] = (attributes.get("error.type"), span.status.code)
    assert seen == {
        t.what: (
            t.error_type,
            Status.STATUS_CODE_ERROR if t.error_type else Status.STATUS_CODE_UNSET,
        )
        for t in sent
    }
