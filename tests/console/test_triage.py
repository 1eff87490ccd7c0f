"""Triage context in the queues: the approvals list shows the file, the size of the change, the
combination and the time left; an unknown call's page shows the call's input, and an
escalation is a notice, not an error."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.models import ApprovalRequest
from reconcile.operator_actions import escalate
from tests.console.conftest import make_user, signed_in

pytestmark = pytest.mark.django_db


def test_the_approvals_queue_shows_what_an_approver_weighs(django_user_model, tenant, pending):
    ApprovalRequest.objects.filter(pk=pending.pk).update(
        expires_at=timezone.now() + timedelta(minutes=30)
    )
    approver = signed_in(make_user(django_user_model, "al", tenant, "approver"))
    response = approver.get("/approvals/", secure=True)
    _approval, _holder, triage = response.context["approvals"][0]
    assert triage.path == "app.py"
    assert (triage.added, triage.removed) == (1, 1)  # the fixture's diff: one line for one
    assert 25 * 60 < triage.expires_in_seconds <= 30 * 60
    html = response.content.decode()
    assert (
        ">app.py</span>" in html and "+1</span>" in html and "\u22121</span>" in html
    )  # a minus sign
    assert ' class="soon">30 min</time>' in html or ' class="soon">29 min</time>' in html


def test_an_unknown_calls_page_shows_its_input(django_user_model, tenant, unknown):
    operator = signed_in(make_user(django_user_model, "op", tenant, "operator"))
    html = operator.get(f"/unknown/{unknown.pk}/", secure=True).content.decode()
    assert "Input (redacted)" in html and "&quot;cart&quot;: 1" in html


def test_an_escalation_is_a_notice_not_an_error(django_user_model, tenant, unknown):
    escalate(record=unknown, actor="op", reason="vendor says they are checking")
    operator = signed_in(make_user(django_user_model, "op", tenant, "operator"))
    html = operator.get(f"/unknown/{unknown.pk}/", secure=True).content.decode()
    assert 'class="notice"' in html and "vendor says they are checking" in html
    assert '<p class="error"' not in html
