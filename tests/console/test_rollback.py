"""Rolling back a version combination: a preview that changes nothing, then the rollback with
a reason; never onto a halted combination, and, when there is no previous one to restore, the
console page asks which to restore before it acts."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models.functions import Now

from ledger import combinations
from ledger.errors import Conflict, InvalidInput
from ledger.models import (
    ApprovalRequest,
    AuditEvent,
    IdempotencyRecord,
    LedgerEntry,
    Run,
    VersionCombination,
    WorkspaceRoot,
)
from reconcile.operator_actions import escalate
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


def test_rolling_back_the_only_active_combination_offers_what_can_be_restored(
    django_user_model, tenant
) -> None:
    only, spare = _combo(tenant, "only"), _combo(tenant, "spare")
    combinations.activate(tenant=tenant, combination_id=only.pk, actor="x", source="api")
    manager = signed_in(make_user(django_user_model, "maria", tenant, "manager"))
    asks = manager.get(f"/combinations/{only.pk}/rollback", secure=True)
    assert asks.status_code == 200 and asks.context["report"] is None
    html = asks.content.decode()
    assert 'class="error"' not in html and "name one" not in html
    assert "There is no previous combination to restore" in html
    assert "the previous combination" not in html  # the option that would fail is not offered
    assert f'href="?restore={spare.pk}"' in html and "spare" in html
    preview = manager.get(f"/combinations/{only.pk}/rollback", {"restore": spare.pk}, secure=True)
    assert preview.context["report"].dry_run and preview.context["restored"] == spare
    assert f'<option value="{spare.pk}" selected>' in preview.content.decode()
    no_reason = manager.post(
        f"/combinations/{only.pk}/rollback", {"restore": spare.pk}, secure=True
    )
    assert no_reason["Location"].endswith(f"?restore={spare.pk}")
    nothing_named = manager.post(
        f"/combinations/{only.pk}/rollback", {"reason": "bad"}, secure=True, follow=True
    )
    assert "replaced no combination that can be restored" in nothing_named.content.decode()
    assert VersionCombination.objects.get(pk=only.pk).state == "active"
    manager.post(
        f"/combinations/{only.pk}/rollback", {"restore": spare.pk, "reason": "bad"}, secure=True
    )
    only.refresh_from_db()
    spare.refresh_from_db()
    assert (only.state, spare.state) == ("halted", "active")


def test_rolling_back_the_only_combination_says_what_to_do(django_user_model, tenant) -> None:
    only = _combo(tenant, "only")
    combinations.activate(tenant=tenant, combination_id=only.pk, actor="x", source="api")
    manager = signed_in(make_user(django_user_model, "maria", tenant, "manager"))
    page = manager.get(f"/combinations/{only.pk}/rollback", secure=True)
    assert page.status_code == 200
    html = page.content.decode()
    assert "only combination this tenant can run" in html
    assert f'href="/combinations/{only.pk}/halt"' in html and "POST /api/v1/combinations" in html
    assert "name one" not in html and 'id="restore"' not in html
    assert VersionCombination.objects.get(pk=only.pk).state == "active"


def test_the_no_previous_explanation_is_in_the_users_language(django_user_model, tenant) -> None:
    from console.models import Preferences

    only, _spare = _combo(tenant, "only"), _combo(tenant, "spare")
    combinations.activate(tenant=tenant, combination_id=only.pk, actor="x", source="api")
    user = make_user(django_user_model, "li", tenant, "manager")
    Preferences.objects.create(user=user, language="zh-hans")
    client = signed_in(user)
    html = client.get(f"/combinations/{only.pk}/rollback", secure=True).content.decode()
    assert "没有可以恢复的上一个版本组合" in html
    assert "There is no previous combination" not in html and "name one" not in html
    response = client.post(
        f"/combinations/{only.pk}/rollback", {"reason": "r"}, secure=True, follow=True
    )
    refused = response.content.decode()
    assert "没有替换过可以恢复的版本组合" in refused and "replaced no combination" not in refused


def _unknown_order(api, run_id: str, cart: int) -> str:
    order = api.call(
        "create_order", {"cart": cart}, run_id=run_id, business_object_id=f"c{cart}"
    ).json()
    api.post(f"/calls/{order['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    return order["idempotency_key"]


def test_the_preview_lists_everything_the_rollback_changes_and_the_result_their_new_states(
    django_user_model, tenant, combos
) -> None:
    _good, bad = combos
    # The writes' workspace is registered: a worker can check their files, so they are queued.
    WorkspaceRoot.objects.create(tenant=tenant, name="repo", path="/srv/repo")
    waiting = [
        make_pending(tenant, path=f"f{n}.py", run_id=f"run-w{n}", checked=False) for n in range(2)
    ]
    api = client_for(tenant)
    api.start_run("run-order")
    no_adapter = _unknown_order(api, "run-order", 7)  # create_order has no downstream adapter
    escalated_key = _unknown_order(api, "run-order", 8)
    escalated = IdempotencyRecord.objects.get(key=escalated_key)
    escalate(record=escalated, actor="op", reason="the shop says maybe")
    manager = signed_in(make_user(django_user_model, "mgr", tenant, "manager"))

    preview = manager.get(f"/combinations/{bad.pk}/rollback", secure=True)
    report = preview.context["report"]
    assert sorted(report.invalidated_approvals) == sorted(a.pk for a in waiting)
    assert report.queued_for_lookup == [a.record.key for a in waiting]
    assert {(i["kind"], i["key"]) for i in report.needs_human} == {
        ("no_lookup", no_adapter),
        ("unknown_escalated", escalated_key),
    }
    html = preview.content.decode()
    assert "2 approvals will be invalidated" in html
    assert "2 unknown calls will be queued for look-up" in html
    assert "Needs a human (2)" in html
    assert "create_order has no downstream adapter to look the key up" in html
    assert "the shop says maybe" in html
    for record in IdempotencyRecord.objects.filter(key__in=[no_adapter, escalated_key]):
        assert f'<a class="key" href="/ledger/records/{record.pk}/"' in html
        assert f'data-copy="{record.key}"' in html
    assert {run.status for run in preview.context["changes"]["runs"]} == {"running"}
    assert {r.run_id for r in preview.context["changes"]["runs"]} == {
        "run-w0",
        "run-w1",
        "run-order",
    }

    done = manager.post(f"/combinations/{bad.pk}/rollback", {"reason": "dup spike"}, secure=True)
    assert done.status_code == 200
    changes = done.context["changes"]
    assert {a.state for a in changes["approvals"]} == {"invalidated"}
    assert {a.pk for a in changes["approvals"]} == {a.pk for a in waiting}
    assert {run.status for run in changes["runs"]} == {"halted"}
    assert [r.key for r in changes["queued"]] == [a.record.key for a in waiting]
    assert all(r.next_reconcile_at is None for r in changes["queued"])
    assert [(kind, record.key) for kind, _why, record in changes["needs_human"]] == [
        ("unknown_escalated", escalated_key),
        ("no_lookup", no_adapter),
    ]
    untouched = IdempotencyRecord.objects.get(pk=escalated.pk)
    assert (untouched.reconcile_attempts, untouched.escalated_at) == (
        escalated.reconcile_attempts,
        IdempotencyRecord.objects.get(pk=escalated.pk).escalated_at,
    )
    html = done.content.decode()
    assert "2 approvals invalidated" in html
    assert "2 unknown calls queued for look-up" in html
    assert '<span class="badge">pending</span>' not in html
    assert not [i for i in done.context["report"].needs_human if i["kind"] == "pending_approval"]
    steps = html[html.index('id="rollback-steps"') :]
    assert f'Restored <a href="/combinations/{_good.pk}/">good</a>: it is the active' in steps
    assert "Queued 2 unknown calls for look-up." in steps
    assert "Left 2 items for a human." in steps
    assert "restored combination" not in steps  # no raw service string


def _pending_left(report: combinations.RollbackReport) -> list[int]:
    return [i["approval_id"] for i in report.needs_human if i["kind"] == "pending_approval"]


def test_a_rollback_leaves_to_a_human_the_approvals_of_its_calls_it_does_not_void(
    tenant, combos
) -> None:
    """A call first recorded under the bad combination whose approval waits for a retry
    planned under another one: the halt voids only approvals planned under the bad one, so
    the report lists it, unless it can no longer be given (expired)."""
    good, bad = combos
    retried = make_pending(tenant, "a.py", "run-a", checked=False)
    expired = make_pending(tenant, "b.py", "run-b", checked=False)
    voided = make_pending(tenant, "c.py", "run-c", checked=False)
    retry = Run.objects.create(tenant=tenant, run_id="run-retry", combination=good, user_id="u")
    LedgerEntry.objects.filter(pk__in=[retried.entry_id, expired.entry_id]).update(
        combination=good, run=retry
    )
    ApprovalRequest.objects.filter(pk=expired.pk).update(expires_at=Now() - timedelta(seconds=1))
    ids = {"tenant": tenant, "combination_id": bad.pk, "actor": "x", "source": "api"}

    preview = combinations.rollback(**ids, reason="r", dry_run=True)
    assert (_pending_left(preview), preview.invalidated_approvals) == ([retried.pk], [voided.pk])
    done = combinations.rollback(**ids, reason="r")
    assert (_pending_left(done), done.invalidated_approvals) == ([retried.pk], [voided.pk])
    states = dict(ApprovalRequest.objects.values_list("pk", "state"))
    assert (states[retried.pk], states[voided.pk]) == ("pending", "invalidated")


def test_a_rollback_that_changes_nothing_says_so(django_user_model, tenant, combos) -> None:
    """The candidate is rolled back once; again, it is halted already, no run runs under it
    and the good combination is active: the preview and the result say nothing changes, never
    "Rolled back"."""
    _good, bad = combos
    client = signed_in(make_user(django_user_model, "mgr", tenant, "manager"))
    first = client.post(f"/combinations/{bad.pk}/rollback", {"reason": "dup spike"}, secure=True)
    assert not first.context["report"].changes_nothing
    assert "Rolled back" in first.content.decode()
    preview = client.get(f"/combinations/{bad.pk}/rollback", secure=True)
    assert preview.context["report"].changes_nothing
    assert "A rollback would change nothing" in preview.content.decode()
    again = client.post(f"/combinations/{bad.pk}/rollback", {"reason": "again"}, secure=True)
    page = again.content.decode()
    assert again.context["report"].changes_nothing
    assert "Nothing changed" in page and "Rolled back" not in page
    api = client_for(tenant).post(f"/combinations/{bad.pk}/rollback", {"reason": "api"})
    assert api.status_code == 200 and api.json()["changes_nothing"] is True
