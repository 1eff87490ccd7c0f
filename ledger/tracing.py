"""OpenTelemetry spans of the ledger's decisions and look-ups, in the caller's trace.

Agent teams debug in their tracing tools; a span per API decision and per reconciliation
look-up puts the ledger's answers there. Spans follow the GenAI semantic conventions for tool
execution (name ``execute_tool {gen_ai.tool.name}``, ``gen_ai.operation.name`` =
``execute_tool``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id``: the runtime's tool-call id,
which is the ledger's step id) plus the ledger's own attributes under ``agent_ledger.``: the
decision, the record's state, the idempotency class and replay policy, the version
combination, and the key's sha256, never the key or the input (either may carry personal data
or secrets).

Errors: a span whose call did not go ahead or succeed carries ``error.type`` (the general
convention the GenAI spans use) and status ERROR. That is a failed call (``FAILED``: the tool
reported a failure, or a retry is answered with it), an uncertain one
(``SIDE_EFFECT_UNCERTAIN``), a refused one (``REPLAY_FORBIDDEN``, ``RUN_HALTED``,
``APPROVAL_REJECTED``, ``PERMISSION_DENIED``), a conflicting one (``IDEMPOTENCY_KEY_CONFLICT``,
``WRITE_CONFLICT``), and any step the API refuses with a problem (its code:
``STALE_FENCING_TOKEN``, ``RECORD_SETTLED``, ``RESULT_CONFLICT``, ``RUN_HALTED``, ...). The value
is always one of the ledger's codes, never a tool's own error code (that one stays in
``agent_ledger.observation.code``), so it has few values; an exception the ledger does not
expect is named by its class, and its stack trace recorded. Not errors: a go-ahead, a recorded
success, a wait for the call's holder (``IN_PROGRESS``), a pause for a human
(``APPROVAL_REQUIRED``) and a shadow run's dry run: each is the protocol working. A look-up's
span is an error when the look-up got no answer (the caller names those outcomes). The
decision stays in ``agent_ledger.decision``: the GenAI conventions have no name for it.

Off by default: ``configure`` installs an exporter only when the standard variables ask for one
(``OTEL_TRACES_EXPORTER=otlp``, or an ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; never with ``OTEL_SDK_DISABLED=true`` or
``OTEL_TRACES_EXPORTER=none``). The exporter is OTLP over HTTP and reads its endpoint, headers
and timeout from the same variables; ``OTEL_SERVICE_NAME`` names the service. Without it the
ledger makes no span at all.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

from ledger.domain import ObservationCode

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from ledger.calls import CallResult
    from ledger.models import IdempotencyRecord

TRACER = "agent_ledger"
NAMESPACE = "agent_ledger"
EXECUTE_TOOL = "execute_tool"
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
ERROR_TYPE = "error.type"
LEDGER_CODES = frozenset(ObservationCode)
#: Refusals that are the protocol working: wait for the holder, for a human, or a dry run.
NOT_ERRORS = frozenset(
    {
        ObservationCode.IN_PROGRESS,
        ObservationCode.APPROVAL_REQUIRED,
        ObservationCode.SHADOW_DRY_RUN,
    }
)


def exporting(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the ``OTEL_*`` variables ask for traces to be exported over OTLP."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = {e.strip().lower() for e in environ.get("OTEL_TRACES_EXPORTER", "").split(",")}
    if exporters - {""}:
        return "otlp" in exporters
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def configure(environ: Mapping[str, str] = os.environ) -> TracerProvider | None:
    """Install the OTLP/HTTP exporter if the environment asks for it (at start-up, once per
    process); the provider, or None when tracing is off."""
    if not exporting(environ):
        return None
    # Imported only when exporting: a process with tracing off never loads the SDK.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create(
        {SERVICE_NAME: environ.get("OTEL_SERVICE_NAME", "") or "agent-ledger"}
    )
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _tracer() -> Tracer | None:
    """The ledger's tracer, or None while no provider is installed: then a decision costs no
    span at all (the API's no-op span still costs tens of microseconds on the hot path)."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):
        return None
    return provider.get_tracer(TRACER)


@contextmanager
def decision_span(headers: Mapping[str, str], operation: str) -> Iterator[Span]:
    """The span of one API decision, a child of the caller's ``traceparent`` when it sent
    one. Named for the tool once the decision says which (``describe_decision``)."""
    tracer = _tracer()
    if tracer is None:
        yield trace.INVALID_SPAN
        return
    parent = propagate.extract(headers) if "traceparent" in headers else None
    with tracer.start_as_current_span(
        EXECUTE_TOOL,
        context=parent,
        kind=SpanKind.SERVER,
        attributes={
            "gen_ai.operation.name": EXECUTE_TOOL,
            f"{NAMESPACE}.api.operation": operation,
        },
        # ``_describe_exception`` does both: a refusal the API answers has no stack trace.
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except Exception as exc:
            _describe_exception(span, exc)
            raise


def _describe_exception(span: Span, exc: Exception) -> None:
    """A step that raised: the problem's code when the API answers it with one (a class
    ``code``: ``errors.LedgerError``, ``services.runs.RunHalted``), else the exception's class,
    with its stack trace."""
    code = getattr(type(exc), "code", None)
    if not isinstance(code, str):
        code = f"{type(exc).__module__}.{type(exc).__qualname__}"
        span.record_exception(exc)
    span.set_attribute(ERROR_TYPE, code)
    span.set_status(Status(StatusCode.ERROR, str(exc)))


def error_type(observation: Mapping[str, object] | None) -> str | None:
    """The ``error.type`` of a call the observation answers: None when it went ahead or
    succeeded, waits or pauses (``NOT_ERRORS``); else the observation's code if it is one of
    the ledger's, ``FAILED`` for a tool's own error code."""
    if not observation or observation.get("ok", True):
        return None
    code = str(observation.get("code") or ObservationCode.FAILED)
    if code in NOT_ERRORS:
        return None
    return code if code in LEDGER_CODES else ObservationCode.FAILED.value


def mark_error(span: Span, error: str) -> None:
    """``error.type`` and status ERROR on ``span``."""
    span.set_attribute(ERROR_TYPE, error)
    span.set_status(Status(StatusCode.ERROR))


def describe_decision(span: Span, result: CallResult) -> None:
    """Name the span for the tool and record what the ledger decided."""
    if not span.is_recording():
        return
    entry = result.entry
    tool = entry.tool.name
    span.update_name(f"{EXECUTE_TOOL} {tool}")
    attributes: dict[str, AttributeValue] = {
        "gen_ai.tool.name": tool,
        "gen_ai.tool.call.id": entry.step_id,
        f"{NAMESPACE}.call.id": str(entry.call_id),
        f"{NAMESPACE}.decision": str(result.decision),
        f"{NAMESPACE}.entry.status": entry.status,
        f"{NAMESPACE}.idempotency": entry.idempotency,
        f"{NAMESPACE}.replay_policy": entry.replay_policy,
    }
    if entry.record is not None:
        attributes[f"{NAMESPACE}.record.state"] = entry.record.state
    if entry.idempotency_key:
        attributes[f"{NAMESPACE}.key.sha256"] = key_hash(entry.idempotency_key)
    if entry.combination_id is not None:
        attributes[f"{NAMESPACE}.combination.id"] = entry.combination_id
    if result.observation and result.observation.get("code"):
        attributes[f"{NAMESPACE}.observation.code"] = result.observation["code"]
    span.set_attributes(attributes)
    error = error_type(result.observation)
    if error is not None:
        mark_error(span, error)


@contextmanager
def lookup_span(record: IdempotencyRecord) -> Iterator[Span]:
    """The span of one reconciliation look-up of ``record`` (a worker's, so no caller)."""
    tracer = _tracer()
    if tracer is None:
        yield trace.INVALID_SPAN
        return
    tool = record.tool.name
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": EXECUTE_TOOL,
        "gen_ai.tool.name": tool,
        f"{NAMESPACE}.api.operation": "lookup",
        f"{NAMESPACE}.idempotency": record.classified_as,
        f"{NAMESPACE}.key.sha256": key_hash(record.key),
        f"{NAMESPACE}.record.id": record.pk,
        f"{NAMESPACE}.lookup.attempt": record.reconcile_attempts + 1,
    }
    if record.combination_id is not None:
        attributes[f"{NAMESPACE}.combination.id"] = record.combination_id
    with tracer.start_as_current_span(
        f"{EXECUTE_TOOL} {tool}",
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except Exception as exc:
            _describe_exception(span, exc)
            raise


def describe_lookup(
    span: Span, *, outcome: str, result: str, state: str, failed: bool = False
) -> None:
    """What the look-up found, what became of the record, and its state after; ``failed``
    when the look-up got no answer (its outcome is then the ``error.type``)."""
    if span.is_recording():
        span.set_attributes(
            {
                f"{NAMESPACE}.lookup.outcome": outcome,
                f"{NAMESPACE}.lookup.result": result,
                f"{NAMESPACE}.record.state": state,
            }
        )
        if failed:
            mark_error(span, outcome)


def outgoing_headers() -> dict[str, str]:
    """The current trace context as W3C headers, for a request the ledger makes (a downstream
    look-up), so the downstream's spans join the trace."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier
