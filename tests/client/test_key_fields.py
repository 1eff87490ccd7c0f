"""Keys that survive re-planning: the model re-issues the same action with a new tool-call id,
and the tool's declared key fields map it to the same key."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from agent_ledger_client import CallContext, LedgerRequestError
from ledger.models import IdempotencyRecord
from sandbox.server import SandboxServer
from tests.sandbox_fixtures import arm

pytestmark = pytest.mark.django_db(transaction=True)


def _create_order(sandbox: SandboxServer, cart: str):
    def execute(ctx: CallContext) -> dict[str, Any]:
        response = httpx.post(
            f"{sandbox.url}/orders/objects",
            json={"reference": cart},
            headers={"Idempotency-Key": ctx.idempotency_key},
            timeout=0.5,
        )
        response.raise_for_status()
        return response.json()

    return execute


def test_a_non_idempotent_tool_with_key_fields_defaults_to_the_business_scope(
    client: Any,
) -> None:
    tool = client.register_tool("create_order", key_fields=["cart.id"])
    assert tool["key_fields"] == ["cart.id"] and tool["key_scope"] == "business"
    read = client.register_tool("get_order_status", key_fields=["order"])
    assert read["key_scope"] == "run"


def test_ten_reissues_with_new_tool_call_ids_leave_one_order(
    client: Any, sandbox: SandboxServer
) -> None:
    client.register_tool("create_order", key_fields=["cart.id"])
    arm(sandbox, service="orders", mode="timeout_after_commit", hang_seconds=2)
    observations = []
    with client.run(user_id="u1") as run:
        for attempt in range(11):  # the first call and ten re-issues
            observations.append(
                run.call(
                    "create_order",
                    {"cart": {"id": "cart-9", "items": ["sku-1"]}},
                    execute=_create_order(sandbox, "cart-9"),
                    step_id=f"toolu_{attempt:02d}",  # a new tool-call id every time
                )
            )
    stats = httpx.get(f"{sandbox.url}/orders/stats").json()
    assert stats["objects"] == 1 and stats["max_per_reference"] == 1
    assert {o["code"] for o in observations} == {"SIDE_EFFECT_UNCERTAIN"}
    record = IdempotencyRecord.objects.get()
    assert record.key.endswith(":create_order:cart.id=cart-9")
    assert (record.executions, record.duplicate_hits) == (1, 10)


def test_a_reissue_in_a_new_run_gets_the_recorded_result(
    client: Any, sandbox: SandboxServer
) -> None:
    client.register_tool("create_order", key_fields=["cart.id"])
    order = {"cart": {"id": "cart-9"}}
    with client.run(user_id="u1") as run:
        first = run.call(
            "create_order", order, execute=_create_order(sandbox, "cart-9"), step_id="a"
        )
    with client.run(user_id="u1") as run:
        again = run.call(
            "create_order", order, execute=_create_order(sandbox, "cart-9"), step_id="b"
        )
    assert first["ok"] is True and again["ok"] is True
    assert again["metadata"]["replayed"] is True and again["content"] == first["content"]
    assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 1


def test_a_call_missing_its_key_field_is_refused_and_runs_nothing(client: Any) -> None:
    client.register_tool("create_order", key_fields=["cart.id"])
    with client.run(user_id="u1") as run, pytest.raises(LedgerRequestError) as refused:
        run.call("create_order", {"basket": "x"}, execute=lambda ctx: pytest.fail("ran"))
    assert refused.value.status == 400 and "cart.id" in str(refused.value)
    assert not IdempotencyRecord.objects.exists()
