"""The demo agent fills a ledger with real decisions, through the client, over HTTP."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from ledger.models import ApprovalRequest, IdempotencyRecord, LedgerEntry, VersionCombination

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_demo_agent_produces_every_kind_of_decision(django_user_model) -> None:
    django_user_model.objects.create_user("approver", password="pw-123456789")
    out = StringIO()
    call_command("demo_agent", runs=3, stdout=out)
    combos = {c.label: c.state for c in VersionCombination.objects.all()}
    assert combos == {"baseline": "active", "candidate": "canary"}
    decisions = set(LedgerEntry.objects.values_list("decision", flat=True))
    assert {"execute", "recorded_result", "forbidden", "approval_required"} <= decisions
    states = set(IdempotencyRecord.objects.values_list("state", flat=True))
    assert {"succeeded", "unknown", "failed_final"} <= states
    assert ApprovalRequest.objects.filter(state="pending").exists()
    assert ApprovalRequest.objects.filter(state="rejected").count() == 1
    assert "(max 1 per key)" in out.getvalue() and "(max 2" not in out.getvalue()
    # The candidate combination is visibly worse: more calls end uncertain.
    uncertain = {
        label: LedgerEntry.objects.filter(combination__label=label, status="uncertain").count()
        for label in combos
    }
    assert uncertain["candidate"] > uncertain["baseline"]
    again = StringIO()
    call_command("demo_agent", runs=1, if_empty=True, stdout=again)
    assert "nothing to do" in again.getvalue()
