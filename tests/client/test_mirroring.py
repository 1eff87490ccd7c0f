"""Mirroring a live run through the client, with both drivers: the ledger says which live
runs to mirror, the client starts the shadow run pinned to the combination in shadow and runs
the agent on it; its read runs, its side effect is answered SHADOW_DRY_RUN and never runs."""

from __future__ import annotations

from typing import Any

import pytest

from agent_ledger_client import CallContext, Mirror
from ledger.models import Run
from tests.client.shadowing import candidate_in_shadow

pytestmark = pytest.mark.django_db(transaction=True)


def _agent(executed: list[str], seen: list[dict[str, Any]]) -> Any:
    """The same two calls as a live run would make: a read, then an order."""

    def agent(run: Any) -> None:
        def tool(name: str) -> Any:
            return lambda ctx: executed.append(f"{name}:{ctx.idempotency_key[:6]}") or "done"

        seen.append(run.call("get_order_status", {"order": "o-1"}, execute=tool("read")))
        seen.append(run.call("create_order", {"cart": "c-1"}, execute=tool("order")))

    return agent


def test_a_mirrored_live_run_reads_and_never_runs_its_side_effect(client: Any) -> None:
    candidate = candidate_in_shadow()
    live = client.start_run(user_id="u1", run_id="live-1")
    assert live.mirror == Mirror("live-1.shadow", "live-1", "u1", candidate.pk)
    executed: list[str] = []
    seen: list[dict[str, Any]] = []
    shadow = client.mirror(live, _agent(executed, seen))
    assert shadow is not None and shadow.run_id == "live-1.shadow"
    assert [e.split(":")[0] for e in executed] == ["read"]
    read, order = seen
    assert read["ok"] is True and read["content"] == "done"
    assert order["code"] == "SHADOW_DRY_RUN"
    run = Run.objects.get(run_id="live-1.shadow")
    assert (run.shadow_of.run_id, run.combination_id, run.status) == (
        "live-1",
        candidate.pk,
        "finished",
    )
    assert run.shadow_of.combination_id != candidate.pk  # the live run stays on the baseline


def test_a_live_run_outside_the_share_is_not_mirrored(client: Any) -> None:
    candidate_in_shadow(share_bp=0)
    live = client.start_run(user_id="u1", run_id="live-2")
    ran: list[Any] = []
    assert live.mirror is None
    assert client.mirror(live, ran.append) is None
    assert ran == [] and not Run.objects.filter(shadow_of__isnull=False).exists()


def test_an_agent_that_fails_in_the_shadow_run_finishes_it_with_the_error(client: Any) -> None:
    candidate_in_shadow()
    live = client.start_run(user_id="u1", run_id="live-3")

    def broken(run: Any) -> None:
        raise LookupError("the candidate's prompt is missing")

    with pytest.raises(LookupError):
        client.mirror(live, broken)
    run = Run.objects.get(run_id="live-3.shadow")
    assert (run.status, run.termination_reason) == ("finished", "error: LookupError")


def test_a_shadow_run_names_the_live_run_and_the_combination(client: Any) -> None:
    """``start_run``'s flag: any run id can be the shadow run of a live run."""
    candidate = candidate_in_shadow()
    client.start_run(user_id="u1", run_id="live-4")
    shadow = client.start_run(
        user_id="u1", run_id="any-name", shadow_of="live-4", combination_id=candidate.pk
    )
    assert shadow.data["shadow_of"] == "live-4" and shadow.mirror is None
    unused: list[CallContext] = []
    observation = shadow.call("create_order", {"cart": "c-4"}, execute=unused.append)
    assert observation["code"] == "SHADOW_DRY_RUN" and unused == []
