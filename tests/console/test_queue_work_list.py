"""The operator's queue is a work list: each unknown call says what happens next and who does
it, an approval's outcome moves it (a rejected re-application of a write that did not land
settles it as not happened, so it leaves the queue), and after acting on an item the operator
is on the next one, told what was done to which call."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db.models.functions import Now

from ledger.models import ApprovalRequest, IdempotencyRecord, LedgerEntry, Tenant
from ledger.records import decide_approval
from ledger.services.approvals import decide
from tests.api.conftest import client_for
from tests.console.conftest import make_pending, make_user, sha, signed_in

pytestmark = pytest.mark.django_db


def _row_of(page: str, record: IdempotencyRecord) -> str:
    """The queue's row of ``record``: from its checkbox to the end of its row."""
    match = re.search(rf'value="{record.pk}" id="pick-{record.pk}".*?</tr>', page, re.S)
    assert match, f"no row for {record.key}"
    return match.group(0)


@pytest.fixture
def approver(django_user_model, tenant: Tenant) -> Any:
    return make_user(django_user_model, "ann", tenant, "approver")


@pytest.fixture
def operator(django_user_model, tenant: Tenant) -> Any:
    return signed_in(make_user(django_user_model, "olga", tenant, "operator"))


def test_a_rejected_write_that_did_not_land_is_settled_and_leaves_the_queue(
    tenant: Tenant, approver: Any, operator: Any
) -> None:
    pending = make_pending(tenant)
    record = pending.record
    assert str(record.pk) in operator.get("/unknown/").content.decode()
    answer = signed_in(approver).post(
        f"/approvals/{pending.pk}/decide", {"decision": "reject", "reason": "not this week"}
    )
    assert answer.status_code == 302
    record.refresh_from_db()
    assert record.state == "failed_final" and record.error["code"] == "NOT_EXECUTED"
    assert "rejected by ann: not this week" in record.error["message"]
    assert f'id="pick-{record.pk}"' not in operator.get("/unknown/").content.decode()
    # The rejection stands: a retry of the write is told so and runs nothing.
    entry = LedgerEntry.objects.filter(record=record).earliest("pk")
    again = client_for(tenant).call(
        "write_file",
        entry.input,
        run_id=entry.run.run_id,
        write_plan={
            "workspace": "repo",
            "path": "app.py",
            "before_hash": sha("a"),
            "after_hash": sha("b"),
            "diff": "",
        },
    )
    assert again.json()["decision"] != "execute", again.content
    assert IdempotencyRecord.objects.get(pk=record.pk).executions == record.executions


def test_the_api_rejection_settles_it_too(tenant: Tenant, approver: Any) -> None:
    from ledger.models import ApiToken
    from tests.api.conftest import ApiClient

    pending = make_pending(tenant)
    token = ApiToken.issue(tenant=tenant, name="ann-laptop", user=approver)[1]
    decided = ApiClient(tenant, token).post(
        f"/approvals/{pending.pk}/decide", {"decision": "reject", "reason": "not this week"}
    )
    assert decided.status_code == 200, decided.content
    assert IdempotencyRecord.objects.get(pk=pending.record_id).state == "failed_final"


def test_a_rejection_of_a_replay_nobody_checked_leaves_the_call_unknown(
    tenant: Tenant, approver: Any
) -> None:
    """Without a file check nobody knows whether the write landed: rejecting its replay
    settles nothing."""
    pending = make_pending(tenant, checked=False)
    decide_approval(approval=pending, user=approver, approve=False, reason="not this week")
    assert IdempotencyRecord.objects.get(pk=pending.record_id).state == "unknown"


def test_each_row_says_what_happens_next_after_each_approval_outcome(
    tenant: Tenant, approver: Any, operator: Any
) -> None:
    waiting = make_pending(tenant, path="a.py", run_id="run-a")
    approved = make_pending(tenant, path="b.py", run_id="run-b")
    expired = make_pending(tenant, path="c.py", run_id="run-c")
    decide(approval=approved, user=approver, approve=True, reason="")
    ApprovalRequest.objects.filter(pk=expired.pk).update(expires_at=Now())
    page = operator.get("/unknown/").content.decode()
    assert "An approver decides whether to apply it again" in _row_of(page, waiting.record)
    assert "Approved by ann" in _row_of(page, approved.record)
    assert "runtime" in _row_of(page, approved.record)
    assert "expired undecided" in _row_of(page, expired.record)
    for pending in (waiting, approved, expired):  # each row names its file, not only the tool
        assert pending.record.write_plan.path in _row_of(page, pending.record)


def test_after_an_action_the_operator_is_on_the_next_call(tenant: Tenant, operator: Any) -> None:
    first, second = make_pending(tenant, "a.py", "run-a"), make_pending(tenant, "b.py", "run-b")
    answer = operator.post(
        f"/unknown/{first.record_id}/action", {"action": "failed", "note": "not there"}
    )
    assert answer.status_code == 302
    assert answer["Location"] == f"/unknown/{second.record_id}/"
    shown = operator.get(answer["Location"]).content.decode()
    assert "write_file (a.py): Marked as not happened" in shown


def test_after_a_decision_the_approver_is_on_the_next_approval(
    tenant: Tenant, approver: Any
) -> None:
    first, second = make_pending(tenant, "a.py", "run-a"), make_pending(tenant, "b.py", "run-b")
    ann = signed_in(approver)
    answer = ann.post(f"/approvals/{first.pk}/decide", {"decision": "approve", "reason": ""})
    assert answer["Location"] == f"/approvals/{second.pk}/"
    assert "write_file (a.py): approved." in ann.get(answer["Location"]).content.decode()


def test_a_calls_page_says_its_next_step_as_the_queue_does(
    tenant: Tenant, approver: Any, operator: Any
) -> None:
    """The page of one unknown call names who acts next and how, in full (an operator cannot
    open approvals: no link to one); once approved, that the runtime's retry applies it."""
    pending = make_pending(tenant)
    record = pending.record
    page = operator.get(f"/unknown/{record.pk}/").content.decode()
    step = re.search(r'<p id="next-step">(.*?)</p>', page, re.S)
    assert step, "no next step on the call's page"
    assert "An approver decides whether to apply it again." in step.group(1)
    assert "/approvals/" not in step.group(1)
    decide_approval(approval=pending, user=approver, approve=True, reason="")
    page = operator.get(f"/unknown/{record.pk}/").content.decode()
    step = re.search(r'<p id="next-step">(.*?)</p>', page, re.S)
    assert step and "Approved by ann" in step.group(1)
