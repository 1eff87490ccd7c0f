"""A downstream adapter's URL template is a tenant admin's input: a look-up goes only where
``ledger.outbound`` allows (no loopback, private or link-local address unless
LEDGER_OUTBOUND_ALLOW_PRIVATE, every resolved address checked, the connection made to the
checked address, no redirect followed). A refused look-up stores no evidence and settles
nothing; the record goes to a human with the reason."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ledger.domain import EscalationKind, RecordState
from ledger.models import IdempotencyRecord
from ledger.records import Outcome, complete_execution
from reconcile.models import DownstreamAdapter, ReconcileAttempt
from reconcile.services import reconcile_record
from tests.factories import refresh, reserve

pytestmark = pytest.mark.django_db


class Internal:
    """An internal service that would answer any look-up as found; the paths it was asked."""

    def __init__(self, redirect_to: str | None = None) -> None:
        self.hits: list[str] = []
        hits = self.hits

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hits.append(self.path)
                if redirect_to:
                    self.send_response(302)
                    self.send_header("Location", redirect_to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps({"state": "succeeded", "secret": "internal"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def internal() -> Iterator[Internal]:
    service = Internal()
    yield service
    service.server.shutdown()


def _unknown_with_adapter(tenant, tool, url_template: str) -> IdempotencyRecord:
    record = reserve(tenant, tool, key="k-1").record
    DownstreamAdapter.objects.create(
        tenant=tenant, tool=tool, url_template=url_template, grace_seconds=0
    )
    return complete_execution(record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")


def _assert_refused(record: IdempotencyRecord, reason: str) -> None:
    attempt = ReconcileAttempt.objects.get(record=record)
    assert attempt.outcome == ReconcileAttempt.Answer.REFUSED
    assert attempt.evidence is None
    assert "look-up URL refused" in attempt.detail and reason in attempt.detail
    after = refresh(record)
    assert after.state == RecordState.UNKNOWN and after.result is None
    assert after.escalation_kind == EscalationKind.NO_CHECK
    assert reason in after.escalation_reason


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]", "0.0.0.0"])  # noqa: S104 - a URL
def test_a_look_up_on_loopback_is_not_fetched(tenant, create_order, internal, host) -> None:
    record = _unknown_with_adapter(
        tenant, create_order, f"http://{host}:{internal.port}/by-key/{{key}}"
    )
    assert reconcile_record(record.pk) == "escalated"
    assert internal.hits == []
    _assert_refused(record, "non-public address")


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/{key}",  # the cloud metadata service
        "http://10.1.2.3/by-key/{key}",
        "http://[fe80::1]/by-key/{key}",
        "file:///etc/passwd#{key}",
    ],
)
def test_a_look_up_to_a_private_or_link_local_address_is_refused(tenant, create_order, url) -> None:
    record = _unknown_with_adapter(tenant, create_order, url)
    assert reconcile_record(record.pk) == "escalated"
    _assert_refused(record, "")


def test_a_name_resolving_to_a_private_address_is_not_fetched(
    tenant, create_order, internal, monkeypatch
) -> None:
    """Any of the name's addresses being private refuses it, the public one first or not."""
    real = socket.getaddrinfo

    def resolve(host: str, *args: object, **kwargs: object) -> list:
        if host == "downstream.example":
            return [
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("192.0.43.10", internal.port)),
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", internal.port)),
            ]
        return real(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    record = _unknown_with_adapter(
        tenant, create_order, f"http://downstream.example:{internal.port}/by-key/{{key}}"
    )
    assert reconcile_record(record.pk) == "escalated"
    assert internal.hits == []
    _assert_refused(record, "resolves to 127.0.0.1")


def test_a_name_that_rebinds_after_the_check_is_not_reached(
    tenant, create_order, internal, monkeypatch
) -> None:
    """DNS rebinding: the name answers a public address to the request's check and loopback
    when the connection is opened; the connection's own check refuses it."""
    answers = iter(["192.0.43.10", "127.0.0.1", "127.0.0.1"])
    real = socket.getaddrinfo

    def rebinding(host: str, *args: object, **kwargs: object) -> list:
        if host == "rebind.example":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), internal.port))]
        return real(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    record = _unknown_with_adapter(
        tenant, create_order, f"http://rebind.example:{internal.port}/by-key/{{key}}"
    )
    assert reconcile_record(record.pk) == "escalated"
    assert internal.hits == []
    _assert_refused(record, "resolves to 127.0.0.1")


def test_a_look_up_host_outside_the_allowed_hosts_is_refused(
    tenant, create_order, internal, settings
) -> None:
    settings.LEDGER_OUTBOUND_ALLOWED_HOSTS = ["billing.example.com"]
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True  # the list applies even then
    record = _unknown_with_adapter(
        tenant, create_order, f"http://127.0.0.1:{internal.port}/by-key/{{key}}"
    )
    assert reconcile_record(record.pk) == "escalated"
    assert internal.hits == []
    _assert_refused(record, "LEDGER_OUTBOUND_ALLOWED_HOSTS")


def test_a_redirect_to_an_internal_host_is_not_followed(
    tenant, create_order, internal, settings
) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True  # the redirecting downstream is local here
    redirecting = Internal(redirect_to=f"http://127.0.0.1:{internal.port}/secret")
    try:
        record = _unknown_with_adapter(
            tenant, create_order, f"http://127.0.0.1:{redirecting.port}/by-key/{{key}}"
        )
        assert reconcile_record(record.pk) == "retry-later"
    finally:
        redirecting.server.shutdown()
    assert redirecting.hits == ["/by-key/k-1"] and internal.hits == []
    attempt = ReconcileAttempt.objects.get(record=record)
    assert attempt.outcome == ReconcileAttempt.Answer.UNREACHABLE
    assert attempt.detail == "unexpected HTTP 302" and attempt.evidence is None
    assert refresh(record).state == RecordState.UNKNOWN


def test_a_private_downstream_is_looked_up_when_private_networks_are_allowed(
    tenant, create_order, internal, settings
) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True
    record = _unknown_with_adapter(
        tenant, create_order, f"http://localhost:{internal.port}/by-key/{{key}}"
    )
    assert reconcile_record(record.pk) == "succeeded"
    assert internal.hits == ["/by-key/k-1"]
    assert refresh(record).state == RecordState.SUCCEEDED
