"""Every API refusal is kept in the installation's security log, counted per principal and
minute (a token by its prefix, a caller without a valid token by its address) so a flood of
them writes a bounded number of rows; a 404 for another tenant's id is answered byte for byte
like one for an id that names nothing, and neither reaches the caller's tenant's audit."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from console.models import DenialWindow, SecurityEvent
from ledger.models import ApiToken, AuditEvent
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.django_db


def _kept(key: str) -> tuple[int, int]:
    """(refusals itemised, refusals counted) of ``key`` in the security log."""
    itemised = SecurityEvent.objects.filter(action="api.denied", actor=key).count()
    windows = DenialWindow.objects.filter(key=key, log="security")
    summaries = SecurityEvent.objects.filter(actor=key, action="denied.suppressed")
    counted = sum(w.suppressed for w in windows) + sum(e.facts["suppressed"] for e in summaries)
    return itemised, counted


def _answer(response: Any, id_text: str) -> tuple[int, bytes, list[tuple[str, str]]]:
    return (
        response.status_code,
        response.content.replace(id_text.encode(), b"<id>"),
        sorted((name, value.replace(id_text, "<id>")) for name, value in response.items()),
    )


def test_another_tenants_call_is_answered_exactly_like_a_missing_one(
    api: ApiClient, other_api: ApiClient
) -> None:
    other_api.start_run()
    theirs = other_api.call("create_order", {"x": 1}, business_object_id="o").json()["call_id"]
    api.start_run()
    audit_before = AuditEvent.objects.filter(tenant=api.tenant).count()
    missing = str(uuid.uuid4())
    foreign, nothing = api.get(f"/calls/{theirs}"), api.get(f"/calls/{missing}")
    assert foreign.status_code == 404
    assert _answer(foreign, theirs) == _answer(nothing, missing)
    # Neither is in the caller's tenant's audit; both are in the security log, by token.
    assert AuditEvent.objects.filter(tenant=api.tenant).count() == audit_before
    kept = SecurityEvent.objects.filter(action="api.denied").order_by("pk")
    prefix = ApiToken.objects.get(tenant=api.tenant).prefix
    assert [(e.reason, e.actor, e.tenant_id) for e in kept] == [
        ("not_found", f"token:{prefix}", api.tenant.pk)
    ] * 2
    assert [e.facts["path"] for e in kept] == [
        f"/api/v1/calls/{theirs}",
        f"/api/v1/calls/{missing}",
    ]


@pytest.mark.parametrize("header", ["Bearer al_wrong", "Bearer nonsense", None])
def test_a_request_without_a_valid_token_is_kept_by_address(header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    response = Client(REMOTE_ADDR="203.0.113.9").get("/api/v1/tools", headers=headers, secure=True)
    assert response.status_code == 401
    [event] = SecurityEvent.objects.all()
    assert (event.reason, event.actor, event.tenant) == (
        "unauthenticated",
        "address:203.0.113.9",
        None,
    )
    assert event.source == "api"


def test_a_revoked_token_is_kept_by_address(api: ApiClient) -> None:
    ApiToken.objects.update(revoked_at=timezone.now())
    assert api.get("/tools").status_code == 401
    [event] = SecurityEvent.objects.all()
    assert (event.reason, event.tenant) == ("unauthenticated", None)


@pytest.mark.parametrize("flood", [pytest.param(1200, marks=pytest.mark.scale), 200])
def test_a_flood_of_bad_tokens_writes_a_bounded_number_of_rows(settings, flood: int) -> None:
    """1,200 probes with wrong tokens (``make drill``; 200 in ``make test``)."""
    client = Client(REMOTE_ADDR="198.51.100.7")
    for n in range(flood):
        headers = {"Authorization": f"Bearer al_guess{n}"}
        assert client.get(f"/api/v1/calls/{uuid.uuid4()}", headers=headers).status_code == 401
    itemised, counted = _kept("address:198.51.100.7")
    assert itemised + counted == flood
    assert itemised <= settings.CONSOLE_DENIALS_AUDITED_PER_MINUTE * 3
    assert DenialWindow.objects.count() <= 3


def test_a_flood_of_ids_not_found_is_counted_per_token(api: ApiClient, settings) -> None:
    prefix = ApiToken.objects.get(tenant=api.tenant).prefix
    for _ in range(60):
        assert api.get(f"/calls/{uuid.uuid4()}").status_code == 404
    itemised, counted = _kept(f"token:{prefix}")
    assert itemised + counted == 60
    assert itemised <= settings.CONSOLE_DENIALS_AUDITED_PER_MINUTE * 3


def test_a_successful_request_keeps_nothing_and_sends_nothing_more(api: ApiClient) -> None:
    api.start_run()
    with CaptureQueriesContext(connection) as captured:
        assert api.get("/tools").status_code == 200
    assert not any("denialwindow" in q["sql"] or "securityevent" in q["sql"] for q in captured)
    assert not SecurityEvent.objects.exists() and not DenialWindow.objects.exists()
