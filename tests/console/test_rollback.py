"""Rolling back a version combination: a preview that changes nothing, then the rollback with
a reason; never onto a halted combination, and, when there is no previous one to restore, the
console page asks which to restore before it acts."""

from __future__ import annotations

import pytest

from ledger.errors import Conflict, InvalidInput
from ledger.models import AuditEvent, VersionCombination
from ledger.services import combinations
from tests.api.conftest import client_for
from tests.console.conftest import make_pending, make_user, signed_in

pytestmark = pytest.mark.django_db
VERSIONS = {"model": "m", "rules": "r", "tool_schema": "t", "data_version": "d"}


def _combo(tenant, label: str) -> VersionCombination:
    combo, _ = combinations.create_combination(
        tenant=tenant, label=label, actor="x", source="api", prompt=label, **VERSIONS
    )
    return combo


def test_a_rollback_never_turns_a_halted_combination_back_on(tenant) -> None:
    good, bad, spare = _combo(tenant, "good"), _combo(tenant, "bad"), _combo(tenant, "spare")
    combinations.activate(tenant=tenant, combination_id=good.pk, actor="x", source="api")
    combinations.activate(tenant=tenant, combination_id=bad.pk, actor="x", source="api")
    combinations.halt(tenant=tenant, combination_id=good.pk, actor="x", source="api", reason="r")
    with pytest.raises(Conflict):  # its previous is halted: a human names what to restore
        combinations.rollback(
            tenant=tenant, combination_id=bad.pk, actor="x", source="api", reason="r"
        )
    with pytest.raises(InvalidInput):
        combinations.rollback(
            tenant=tenant,
            combination_id=bad.pk,
            actor="x",
            source="api",
            reason="r",
            restore_id=good.pk,
        )
    assert VersionCombination.objects.get(pk=good.pk).state == "halted"
    assert VersionCombination.objects.get(pk=bad.pk).state == "active"
    combinations.rollback(
        tenant=tenant,
        combination_id=bad.pk,
        actor="x",
        source="api",
        reason="r",
        restore_id=spare.pk,
    )
    states = dict(VersionCombination.objects.values_list("label", "state"))
    assert states == {"good": "halted", "bad": "halted", "spare": "active"}


def test_rollback_previews_then_confirms(django_user_model, tenant, combos) -> None:
    good, bad = combos
    client = signed_in(make_user(django_user_model, "mgr", tenant, "manager"))
    preview = client.get(f"/combinations/{bad.pk}/rollback", secure=True)
    assert preview.status_code == 200 and preview.context["report"].dry_run
    assert VersionCombination.objects.get(pk=bad.pk).state == "active"  # nothing changed yet
    empty = client.post(f"/combinations/{bad.pk}/rollback", {"reason": ""}, secure=True)
    assert empty.status_code == 302
    assert VersionCombination.objects.get(pk=bad.pk).state == "active"
    done = client.post(f"/combinations/{bad.pk}/rollback", {"reason": "dup spike"}, secure=True)
    assert done.status_code == 200 and not done.context["report"].dry_run
    assert VersionCombination.objects.get(pk=good.pk).state == "active"
    assert AuditEvent.objects.filter(action="rollback.completed", actor="mgr").exists()


def test_rolling_back_the_only_active_combination_asks_what_to_restore(
    django_user_model, tenant
) -> None:
    only, spare = _combo(tenant, "only"), _combo(tenant, "spare")
    combinations.activate(tenant=tenant, combination_id=only.pk, actor="x", source="api")
    manager = signed_in(make_user(django_user_model, "maria", tenant, "manager"))
    asks = manager.get(f"/combinations/{only.pk}/rollback", secure=True)
    assert asks.status_code == 200 and asks.context["report"] is None
    html = asks.content.decode()
    assert "no previous combination to restore" in html and f'value="{spare.pk}"' in html
    preview = manager.get(f"/combinations/{only.pk}/rollback", {"restore": spare.pk}, secure=True)
    assert preview.context["report"].dry_run and preview.context["restored"] == spare
    no_reason = manager.post(
        f"/combinations/{only.pk}/rollback", {"restore": spare.pk}, secure=True
    )
    assert no_reason["Location"].endswith(f"?restore={spare.pk}")
    manager.post(
        f"/combinations/{only.pk}/rollback", {"restore": spare.pk, "reason": "bad"}, secure=True
    )
    only.refresh_from_db()
    spare.refresh_from_db()
    assert (only.state, spare.state) == ("halted", "active")


def test_the_preview_lists_everything_the_rollback_changes_and_the_result_their_new_states(
    django_user_model, tenant, combos
) -> None:
    _good, bad = combos
    waiting = [make_pending(tenant, path=f"f{n}.py", run_id=f"run-w{n}") for n in range(2)]
    api = client_for(tenant)
    api.start_run("run-order")
    order = api.call("create_order", {"cart": 7}, run_id="run-order", business_object_id="c7")
    api.post(
        f"/calls/{order.json()['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"}
    )
    unknown_key = order.json()["idempotency_key"]
    manager = signed_in(make_user(django_user_model, "mgr", tenant, "manager"))

    preview = manager.get(f"/combinations/{bad.pk}/rollback", secure=True)
    report = preview.context["report"]
    assert sorted(report.invalidated_approvals) == sorted(a.pk for a in waiting)
    assert not [item for item in report.needs_human if item["kind"] == "pending_approval"]
    html = preview.content.decode()
    assert "2 approvals will be invalidated" in html
    for approval in waiting:
        assert approval.record.key in html
    assert {run.status for run in preview.context["changes"]["runs"]} == {"running"}
    assert {r.run_id for r in preview.context["changes"]["runs"]} == {
        "run-w0",
        "run-w1",
        "run-order",
    }
    # The writes waiting for approval are unknown too: all three are queued for look-up.
    queued = {r.key for r in preview.context["changes"]["lookups"]}
    assert queued == {unknown_key} | {a.record.key for a in waiting}

    done = manager.post(f"/combinations/{bad.pk}/rollback", {"reason": "dup spike"}, secure=True)
    assert done.status_code == 200
    changes = done.context["changes"]
    assert {a.state for a in changes["approvals"]} == {"invalidated"}
    assert {a.pk for a in changes["approvals"]} == {a.pk for a in waiting}
    assert {run.status for run in changes["runs"]} == {"halted"}
    html = done.content.decode()
    assert "2 approvals invalidated" in html
    assert '<span class="badge">pending</span>' not in html
    assert not [i for i in done.context["report"].needs_human if i["kind"] == "pending_approval"]
