"""An unknown call's page shows its action's approvals (state, who asked, a link for the roles
that open them) and every audit event of the action, its calls and its approvals."""

from __future__ import annotations

import pytest

from ledger.models import AuditEvent
from tests.console.conftest import make_pending, make_user, signed_in

pytestmark = pytest.mark.django_db


def test_an_unknown_calls_page_shows_its_approvals_and_their_events(
    django_user_model, tenant
) -> None:
    approval = make_pending(tenant, path="landing.py", run_id="run-land")
    record = approval.record
    assert record.state == "unknown" and approval.state == "pending"
    operator = signed_in(make_user(django_user_model, "op", tenant, "operator"))
    html = operator.get(f"/unknown/{record.pk}/", secure=True).content.decode()
    approvals = html[
        html.index('id="record-approvals"') : html.index(
            "</section>", html.index('id="record-approvals"')
        )
    ]
    assert f"Approval #{approval.pk}" in approvals and "pending" in approvals
    assert approval.requested_by in approvals
    assert f'href="/approvals/{approval.pk}/"' not in approvals  # operators do not open them
    assert "an approver decides it" in approvals
    events = AuditEvent.objects.filter(target_type="approvalrequest", target_id=str(approval.pk))
    assert events.exists()
    for event in events:  # the approval's own events, each linked to its page
        assert f'href="/audit/{event.pk}/">{event.action}</a>' in html
    admin = signed_in(make_user(django_user_model, "root", tenant, "admin"))
    html = admin.get(f"/unknown/{record.pk}/", secure=True).content.decode()
    assert f'href="/approvals/{approval.pk}/"' in html
