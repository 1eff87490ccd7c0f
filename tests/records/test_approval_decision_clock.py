"""An approval's expiry is judged by the database's clock when its row is locked (DESIGN
section 3): a decision that waited for the lock while the request expired finds it expired."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connections, transaction

from ledger.domain import KeyScope
from ledger.models import ApprovalRequest
from ledger.services.approvals import ApprovalError, decide
from tests.api.conftest import client_for
from tests.api.test_approval_binding import _sha, _write
from tests.factories import make_approver, make_tool
from tests.records.test_execution_races import _waiting_for_a_lock

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _pending_approval(tenant) -> ApprovalRequest:
    """A write whose outcome is unknown, its replay waiting for a human's decision."""
    make_tool(tenant, "write_file", key_scope=KeyScope.BUSINESS)
    api = client_for(tenant)
    api.start_run()
    first = _write(api, "run-1").json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    replay = api.post(f"/calls/{first['call_id']}/replay", {"current_hash": _sha("old")}).json()
    assert replay["decision"] == "approval_required", replay
    return ApprovalRequest.objects.get()


def test_a_decision_that_waited_for_the_lock_past_the_expiry_finds_the_request_expired(
    tenant,
) -> None:
    approval = _pending_approval(tenant)
    approver = make_approver(tenant, "approver")
    outcome: dict[str, Any] = {}
    started = threading.Event()

    def decide_it() -> None:
        try:
            started.wait(timeout=30)
            decide(approval=approval, user=approver, approve=True, reason="ok")
            outcome["answer"] = "approved"
        except ApprovalError as error:
            outcome["answer"] = str(error)
        finally:
            connections.close_all()

    thread = threading.Thread(target=decide_it)
    thread.start()
    with transaction.atomic():
        ApprovalRequest.objects.select_for_update().get(pk=approval.pk)
        started.set()
        for _ in range(300):
            if _waiting_for_a_lock():
                break
            time.sleep(0.01)
        else:
            pytest.fail("the decision never waited for the approval's lock")
        # The request expires while the decision waits for its row.
        with connections["default"].cursor() as cursor:
            cursor.execute(
                "UPDATE ledger_approvalrequest SET expires_at = clock_timestamp() + "
                "interval '200 milliseconds' WHERE id = %s",
                [approval.pk],
            )
        time.sleep(0.5)
    thread.join(timeout=30)
    assert outcome["answer"] == "the request expired"
    assert ApprovalRequest.objects.get().state == "expired"
