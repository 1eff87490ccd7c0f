"""Console fixtures: users with roles in a tenant, and ledger states that need a human."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from django.test import Client

from ledger.models import (
    ApprovalRequest,
    DeclaredCompensation,
    IdempotencyRecord,
    Membership,
    Tenant,
)
from reconcile.models import CompensationAdapter
from tests.api.conftest import ApiClient, client_for
from tests.factories import make_tool


def make_user(django_user_model, name: str, tenant: Tenant, role: str = ""):
    """A user who is a member of ``tenant`` with ``role`` there (none by default)."""
    user = django_user_model.objects.create_user(name, password="pw-123456789")
    Membership.objects.create(user=user, tenant=tenant, role=role)
    return user


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def make_pending(
    tenant: Tenant,
    path: str = "app.py",
    run_id: str = "run-1",
    api: ApiClient | None = None,
    *,
    checked: bool = True,
) -> ApprovalRequest:
    """A conditional write whose replay waits for an approval, with an HTML-laden diff,
    requested with ``api``'s token (by default a new one of a service account). ``checked``:
    the replay reports the file's hash, still the plan's before-hash (the write did not land,
    which escalates the record); else it reports none and only the approval waits."""
    api = api or client_for(tenant)
    api.start_run(run_id)
    plan = {
        "workspace": "repo",
        "path": path,
        "before_hash": sha("a"),
        "after_hash": sha("b"),
        "diff": f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-<b>old</b>\n"
        "+<script>alert(1)</script>\n",
    }
    first = api.call("write_file", {"path": path}, write_plan=plan, run_id=run_id).json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    api.post(f"/calls/{first['call_id']}/replay", {"current_hash": sha("a")} if checked else {})
    return ApprovalRequest.objects.get(record__key=first["idempotency_key"])


@pytest.fixture
def pending(tenant) -> ApprovalRequest:
    return make_pending(tenant)


@pytest.fixture
def unknown(tenant) -> IdempotencyRecord:
    api = client_for(tenant)
    api.start_run()
    first = api.call("create_order", {"cart": 1}, business_object_id="c1").json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    return IdempotencyRecord.objects.get(key=first["idempotency_key"])


@pytest.fixture
def combos(tenant):
    from ledger import combinations

    versions = {"model": "m", "prompt": "p", "rules": "r", "tool_schema": "t", "data_version": "d"}
    good, _ = combinations.create_combination(
        tenant=tenant, label="good", actor="x", source="api", **versions
    )
    bad, _ = combinations.create_combination(
        tenant=tenant, label="bad", actor="x", source="api", **{**versions, "prompt": "p2"}
    )
    combinations.activate(tenant=tenant, combination_id=good.pk, actor="x", source="api")
    combinations.activate(tenant=tenant, combination_id=bad.pk, actor="x", source="api")
    return good, bad


def make_shadow_pair(tenant: Tenant, live_id: str = "run-1", shadow_id: str = "shadow-1") -> None:
    """A live run that orders and charges, and a shadow run mirroring it under a combination
    in shadow: its order is a dry run, so it never charges (two steps differ)."""
    from ledger import combinations

    versions = {"model": "m", "prompt": "p", "rules": "r", "tool_schema": "t"}
    live_combo, _ = combinations.create_combination(
        tenant=tenant,
        label=f"{live_id}-live",
        actor="x",
        source="api",
        data_version="1",
        **versions,
    )
    combinations.activate(tenant=tenant, combination_id=live_combo.pk, actor="x", source="api")
    candidate, _ = combinations.create_combination(
        tenant=tenant,
        label=f"{shadow_id}-next",
        actor="x",
        source="api",
        data_version="2",
        **versions,
    )
    combinations.set_shadow(tenant=tenant, combination_id=candidate.pk, actor="x", source="api")
    api = client_for(tenant)
    for run_id, extra in ((live_id, {}), (shadow_id, {"shadow": True, "mirrors_run_id": live_id})):
        started = api.post("/runs", {"run_id": run_id, "user_id": "u1", **extra})
        assert started.status_code == 201, started.content
        api.call("read_file", {"path": "README.md"}, run_id=run_id, step_id="s-read")
        order = api.call(
            "create_order", {"cart": 1}, run_id=run_id, step_id="s-order", business_object_id="c"
        ).json()
        if order["decision"] == "execute":
            api.post(
                f"/calls/{order['call_id']}/complete",
                {"fencing_token": 1, "outcome": "succeeded", "result": {"order": 1}},
            )
            api.call(
                "charge_customer",
                {"amount": 5},
                run_id=run_id,
                step_id="s-charge",
                business_object_id="c",
            )


@pytest.fixture
def ordered(tenant: Tenant, settings: Any) -> IdempotencyRecord:
    """A succeeded create_order whose compensation is declared, and its cancel adapter."""
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True
    orders = make_tool(tenant, "create_order")
    cancel = make_tool(tenant, "cancel_order")
    CompensationAdapter.objects.create(
        tenant=tenant,
        tool=cancel,
        url_template="http://127.0.0.1:9/orders/objects/{order_id}/cancel",
    )
    DeclaredCompensation.objects.create(
        tenant=tenant,
        tool=orders,
        compensating_tool=cancel,
        arguments={"order_id": "result.id"},
        declared_by="test",
    )
    api = client_for(tenant)
    api.start_run()
    call = api.call("create_order", {"cart": "c-1"}).json()
    api.post(
        f"/calls/{call['call_id']}/complete",
        {"fencing_token": 1, "outcome": "succeeded", "result": {"id": "ord_<b>1</b>"}},
    )
    return IdempotencyRecord.objects.get(key=call["idempotency_key"])
