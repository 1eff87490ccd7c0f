"""A version combination's lifecycle (docs/rollout.md): every allowed and every forbidden
change of state, each by the one service function that owns it; a halt remembers what it
stopped and a resume restores exactly that; retirement needs a reason and is audited as one."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connections

from ledger import combinations
from ledger.errors import Conflict, InvalidInput, InvalidTransition
from ledger.models import ApprovalRequest, AuditEvent, Run, Tenant, VersionCombination
from ledger.services.runs import pick_combination, start_run
from tests.console.conftest import make_pending

pytestmark = pytest.mark.django_db
State = VersionCombination.State
_labels = itertools.count(1)

ALLOWED = {
    (State.NEW, State.SHADOW),
    (State.NEW, State.CANARY),
    (State.NEW, State.ACTIVE),
    (State.NEW, State.HALTED),
    (State.NEW, State.RETIRED),
    (State.SHADOW, State.NEW),
    (State.SHADOW, State.CANARY),
    (State.SHADOW, State.ACTIVE),
    (State.SHADOW, State.HALTED),
    (State.SHADOW, State.RETIRED),
    (State.CANARY, State.SHADOW),
    (State.CANARY, State.ACTIVE),
    (State.CANARY, State.HALTED),
    (State.CANARY, State.RETIRED),
    # Only by the activation of another one (or a rollback): never by ``retire``.
    (State.ACTIVE, State.RETIRED),
    (State.ACTIVE, State.HALTED),
    # A resume returns to the state it halted from; a retirement discards it.
    (State.HALTED, State.NEW),
    (State.HALTED, State.SHADOW),
    (State.HALTED, State.CANARY),
    (State.HALTED, State.ACTIVE),
    (State.HALTED, State.RETIRED),
    (State.RETIRED, State.SHADOW),
    (State.RETIRED, State.CANARY),
    (State.RETIRED, State.ACTIVE),
    (State.RETIRED, State.HALTED),
}


def test_the_transition_table_is_exactly_the_designed_one() -> None:
    table = {(a, b) for a, targets in VersionCombination.TRANSITIONS.items() for b in targets}
    assert table == ALLOWED
    assert set(VersionCombination.TRANSITIONS) == set(State)
    # Nothing goes back to new but what never ran: out of shadow, or a resume of a new one.
    assert {a for a, b in table if b == State.NEW} == {State.SHADOW, State.HALTED}


def _new(tenant: Tenant) -> VersionCombination:
    label = f"c{next(_labels)}"
    combination, _ = combinations.create_combination(
        tenant=tenant,
        label=label,
        actor="test",
        source="api",
        model=label,
        prompt="p",
        rules="r",
        tool_schema="t",
        data_version="d",
    )
    return combination


def _baseline(tenant: Tenant) -> VersionCombination:
    """The tenant's active combination, made once."""
    active = VersionCombination.objects.filter(tenant=tenant, state=State.ACTIVE).first()
    if active is not None:
        return active
    return combinations.activate(
        tenant=tenant, combination_id=_new(tenant).pk, actor="test", source="api"
    )


def _in_state(tenant: Tenant, state: str) -> VersionCombination:
    """A combination in ``state``, reached through the services (a halted one halted as a
    canary, a retired one a canary retired), beside an active baseline."""
    baseline = _baseline(tenant)
    if state == State.ACTIVE:
        return baseline
    combination = _new(tenant)
    ids = {"tenant": tenant, "combination_id": combination.pk, "actor": "test", "source": "api"}
    if state == State.SHADOW:
        combinations.set_shadow(**ids, share_bp=2500)
    elif state in (State.CANARY, State.HALTED, State.RETIRED):
        combinations.set_canary(**ids, share_bp=1000)
    if state == State.HALTED:
        combinations.halt(**ids, reason="incident")
    if state == State.RETIRED:
        combinations.retire(**ids, reason="done with it")
    combination.refresh_from_db()
    assert combination.state == state
    return combination


def _ids(combination: VersionCombination) -> dict[str, Any]:
    return {
        "tenant": combination.tenant,
        "combination_id": combination.pk,
        "actor": "test",
        "source": "api",
    }


def _roll_back(**ids: Any) -> Any:
    """A rollback; the active combination's restores a new one (it replaced none)."""
    bad = VersionCombination.objects.get(pk=ids["combination_id"])
    restore = _new(ids["tenant"]).pk if bad.state == State.ACTIVE else None
    return combinations.rollback(**ids, reason="r", restore_id=restore)


# Each action, and the states it moves a combination out of (to the state it names, or, for
# unshadow and resume, to the state the combination came from).
ACTIONS: dict[str, tuple[Callable[..., Any], set[str]]] = {
    "activate": (combinations.activate, {State.NEW, State.SHADOW, State.CANARY, State.RETIRED}),
    "canary": (
        lambda **ids: combinations.set_canary(**ids, share_bp=500),
        {State.NEW, State.SHADOW, State.RETIRED},
    ),
    "shadow": (
        lambda **ids: combinations.set_shadow(**ids, share_bp=100),
        {State.NEW, State.CANARY, State.RETIRED},
    ),
    "unshadow": (lambda **ids: combinations.unshadow(**ids, reason="r"), {State.SHADOW}),
    "halt": (
        lambda **ids: combinations.halt(**ids, reason="r"),
        {State.NEW, State.SHADOW, State.CANARY, State.ACTIVE, State.RETIRED},
    ),
    "resume": (lambda **ids: combinations.resume(**ids, reason="r"), {State.HALTED}),
    "retire": (
        lambda **ids: combinations.retire(**ids, reason="r"),
        {State.NEW, State.SHADOW, State.CANARY, State.HALTED},
    ),
    "rollback": (_roll_back, {State.ACTIVE, State.CANARY, State.SHADOW, State.HALTED}),
}
# An action on a combination already where it leads changes nothing and is no error (or, for
# a canary and a combination in shadow, changes only its share; a halted combination's
# rollback only restores another).
NO_OPS = {
    ("activate", State.ACTIVE),
    ("halt", State.HALTED),
    ("rollback", State.HALTED),
    ("canary", State.CANARY),
    ("shadow", State.SHADOW),
}


def test_the_services_allow_each_action_from_exactly_these_states() -> None:
    assert {action: allowed for action, (_do, allowed) in ACTIONS.items()} == dict(
        combinations.ACTION_FROM
    )


CASES = [(action, state) for action in ACTIONS for state in State if (action, state) not in NO_OPS]


@pytest.mark.parametrize(("action", "state"), CASES, ids=[f"{a}-{s}" for a, s in CASES])
def test_each_action_from_each_state_is_allowed_or_refused_with_nothing_changed(
    tenant, action: str, state: str
) -> None:
    combination = _in_state(tenant, state)
    do, allowed_from = ACTIONS[action]
    events = AuditEvent.objects.count()
    if state in allowed_from:
        do(**_ids(combination))
        combination.refresh_from_db()
        assert (state, combination.state) in ALLOWED
        assert AuditEvent.objects.count() > events
    else:
        before = VersionCombination.objects.filter(pk=combination.pk).values().get()
        with pytest.raises(InvalidTransition) as refused:
            do(**_ids(combination))
        assert combination.label in refused.value.message
        assert VersionCombination.objects.filter(pk=combination.pk).values().get() == before
        assert AuditEvent.objects.count() == events


def test_a_new_combination_is_new_and_takes_no_run(tenant) -> None:
    baseline = _baseline(tenant)
    fresh = _new(tenant)
    assert fresh.state == State.NEW
    created = AuditEvent.objects.get(action="combination.created", target_id=str(fresh.pk))
    assert created.after["state"] == "new"
    assert {pick_combination(tenant, f"run-{n}") for n in range(200)} == {baseline}


@pytest.mark.parametrize(
    ("start", "share"),
    [(State.CANARY, 1000), (State.SHADOW, 2500), (State.NEW, 0), (State.RETIRED, 0)],
)
def test_a_resume_restores_the_state_and_share_it_halted_from(tenant, start, share) -> None:
    combination = _in_state(tenant, start)
    combinations.halt(**_ids(combination), reason="looks bad")
    halted = VersionCombination.objects.get(pk=combination.pk)
    assert (halted.state, halted.canary_share_bp) == ("halted", 0)
    assert (halted.halted_from, halted.halted_from_share_bp) == (start, share)
    plan = combinations.resume(**_ids(combination), reason="false alarm")
    assert (plan.state, plan.share_bp, plan.replaces) == (start, share, None)
    resumed = VersionCombination.objects.get(pk=combination.pk)
    assert (resumed.state, resumed.canary_share_bp) == (start, share)
    assert (resumed.halted_from, resumed.halted_at, resumed.halted_reason) == ("", None, "")
    assert VersionCombination.objects.get(tenant=tenant, state="active") == _baseline(tenant)
    event = AuditEvent.objects.filter(action="combination.resumed").get()
    assert (event.detail, event.actor) == ("false alarm", "test")
    assert event.before["state"] == "halted" and event.before["halted_reason"] == "looks bad"
    assert (event.after["state"], event.after["canary_share_bp"]) == (start, share)


def test_a_resumed_canary_takes_its_share_of_new_runs_again(tenant) -> None:
    canary = _in_state(tenant, State.CANARY)
    runs = [f"run-{n}" for n in range(400)]
    before = {r for r in runs if pick_combination(tenant, r) == canary}
    combinations.halt(**_ids(canary), reason="r")
    combinations.resume(**_ids(canary), reason="r")
    assert {r for r in runs if pick_combination(tenant, r) == canary} == before != set()


def test_resuming_the_active_combination_makes_it_active_again(tenant) -> None:
    baseline = _baseline(tenant)
    combinations.halt(**_ids(baseline), reason="incident")
    with pytest.raises(Exception, match="halted"):  # fail closed meanwhile
        start_run(tenant=tenant, user_id="u", actor="t", run_id="r-during")
    plan = combinations.plan_resume(tenant=tenant, combination_id=baseline.pk)
    assert (plan.state, plan.replaces, plan.refused) == ("active", None, "")
    combinations.resume(**_ids(baseline), reason="fixed")
    run, _ = start_run(tenant=tenant, user_id="u", actor="t", run_id="r-after")
    assert run.combination_id == baseline.pk


def test_resuming_the_halted_active_combination_retires_the_one_restored_meanwhile(
    tenant,
) -> None:
    baseline = _baseline(tenant)
    spare = _new(tenant)
    combinations.rollback(**_ids(baseline), reason="bad", restore_id=spare.pk)
    plan = combinations.plan_resume(tenant=tenant, combination_id=baseline.pk)
    assert (plan.state, plan.replaces) == ("active", spare)
    combinations.resume(**_ids(baseline), reason="the rollback was a mistake")
    states = dict(VersionCombination.objects.filter(tenant=tenant).values_list("pk", "state"))
    assert (states[baseline.pk], states[spare.pk]) == ("active", "retired")
    assert VersionCombination.objects.get(pk=baseline.pk).previous_id == spare.pk
    retired = AuditEvent.objects.filter(action="combination.retired", target_id=str(spare.pk)).get()
    assert retired.detail == "the rollback was a mistake"


def test_a_canary_resumes_only_if_the_other_canaries_leave_room(tenant) -> None:
    canary = _in_state(tenant, State.CANARY)
    combinations.halt(**_ids(canary), reason="r")
    other = _new(tenant)
    combinations.set_canary(**_ids(other), share_bp=9500)
    plan = combinations.plan_resume(tenant=tenant, combination_id=canary.pk)
    assert "more than 100%" in plan.refused
    with pytest.raises(Conflict):
        combinations.resume(**_ids(canary), reason="r")
    assert VersionCombination.objects.get(pk=canary.pk).state == "halted"


def test_a_combination_in_shadow_halted_and_resumed_still_knows_where_it_came_from(
    tenant,
) -> None:
    canary = _in_state(tenant, State.CANARY)
    combinations.set_shadow(**_ids(canary), share_bp=3000)
    combinations.halt(**_ids(canary), reason="r")
    combinations.resume(**_ids(canary), reason="r")
    shadow = VersionCombination.objects.get(pk=canary.pk)
    assert (shadow.state, shadow.canary_share_bp) == ("shadow", 3000)
    combinations.unshadow(**_ids(canary), reason="compared enough")
    back = VersionCombination.objects.get(pk=canary.pk)
    assert (back.state, back.canary_share_bp, back.shadowed_from) == ("canary", 1000, "")
    event = AuditEvent.objects.get(action="combination.unshadowed")
    assert (event.before["state"], event.after["state"], event.detail) == (
        "shadow",
        "canary",
        "compared enough",
    )


def test_out_of_shadow_a_new_combination_is_new_again(tenant) -> None:
    shadow = _in_state(tenant, State.SHADOW)
    with pytest.raises(InvalidInput):
        combinations.unshadow(**_ids(shadow), reason=" ")
    combinations.unshadow(**_ids(shadow), reason="r")
    assert VersionCombination.objects.get(pk=shadow.pk).state == "new"


def test_the_halt_reports_the_approvals_it_voids_and_the_runs_in_flight(tenant) -> None:
    active = _baseline(tenant)
    waiting = [make_pending(tenant, path=f"f{n}.py", run_id=f"run-w{n}") for n in range(2)]
    result = combinations.halt(**_ids(active), reason="incident")
    assert result.newly
    assert result.invalidated_approvals == [a.pk for a in waiting]
    assert result.runs_in_flight == ["run-w0", "run-w1"]
    assert set(ApprovalRequest.objects.values_list("state", flat=True)) == {"invalidated"}
    event = AuditEvent.objects.get(action="combination.halted")
    assert event.after["invalidated_approvals"] == result.invalidated_approvals
    assert (event.before["state"], event.after["state"]) == ("active", "halted")
    again = combinations.halt(**_ids(active), reason="again")
    assert (again.newly, again.invalidated_approvals) == (False, [])


def test_retiring_needs_a_reason_and_is_audited_as_a_retirement(tenant) -> None:
    canary = _in_state(tenant, State.CANARY)
    with pytest.raises(InvalidInput):
        combinations.retire(**_ids(canary), reason="")
    combinations.retire(**_ids(canary), reason="the candidate lost")
    retired = VersionCombination.objects.get(pk=canary.pk)
    assert (retired.state, retired.canary_share_bp) == ("retired", 0)
    event = AuditEvent.objects.get(action="combination.retired", target_id=str(canary.pk))
    assert (event.before["state"], event.before["canary_share_bp"]) == ("canary", 1000)
    assert (event.after["state"], event.detail) == ("retired", "the candidate lost")
    assert not AuditEvent.objects.filter(
        action="combination.canary", target_id=str(canary.pk), after__canary_share_bp=0
    ).exists()


def test_a_canary_share_of_zero_is_refused_in_favour_of_retiring(tenant) -> None:
    canary = _in_state(tenant, State.CANARY)
    with pytest.raises(InvalidInput, match="retire it"):
        combinations.set_canary(**_ids(canary), share_bp=0)
    assert VersionCombination.objects.get(pk=canary.pk).state == "canary"


def test_retiring_a_halted_combination_halts_its_runs_in_flight(tenant) -> None:
    canary = _in_state(tenant, State.CANARY)
    run_id = next(f"run-{n}" for n in range(1000) if pick_combination(tenant, f"run-{n}") == canary)
    start_run(tenant=tenant, user_id="u", actor="t", run_id=run_id)
    combinations.halt(**_ids(canary), reason="r")
    plan = combinations.plan_retire(tenant=tenant, combination_id=canary.pk)
    assert (plan.runs_in_flight, plan.halts_runs, plan.refused) == ([run_id], True, "")
    combinations.retire(**_ids(canary), reason="discard")
    run = Run.objects.get(run_id=run_id)
    assert (run.status, run.termination_reason) == ("halted", "combination retired while halted")
    event = AuditEvent.objects.get(action="combination.retired", target_id=str(canary.pk))
    assert event.after["halted_runs"] == [run_id] and event.before["state"] == "halted"


def test_the_halted_combination_the_tenant_fails_closed_on_is_not_retired(tenant) -> None:
    baseline = _baseline(tenant)
    combinations.halt(**_ids(baseline), reason="incident")
    plan = combinations.plan_retire(tenant=tenant, combination_id=baseline.pk)
    assert "fail closed" in plan.refused
    with pytest.raises(InvalidTransition, match="fail closed"):
        combinations.retire(**_ids(baseline), reason="r")
    assert VersionCombination.objects.get(pk=baseline.pk).state == "halted"


def test_a_halted_combination_is_not_activated_but_resumed(tenant) -> None:
    canary = _in_state(tenant, State.HALTED)
    with pytest.raises(InvalidTransition, match="resume it"):
        combinations.activate(**_ids(canary))


@pytest.mark.django_db(transaction=True)
def test_two_resumes_at_once_resume_once() -> None:
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    canary = _in_state(tenant, State.HALTED)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def resume() -> None:
        try:
            barrier.wait(10)
            combinations.resume(**_ids(canary), reason="both clicked")
            outcomes.append("resumed")
        except InvalidTransition:
            outcomes.append("refused")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=resume) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["refused", "resumed"]
    assert AuditEvent.objects.filter(action="combination.resumed").count() == 1
    resumed = VersionCombination.objects.get(pk=canary.pk)
    assert (resumed.state, resumed.canary_share_bp) == ("canary", 1000)


def test_the_database_refuses_a_halted_combination_that_cannot_say_what_to_resume(
    tenant,
) -> None:
    from django.db import IntegrityError, transaction

    combination = _new(tenant)
    with pytest.raises(IntegrityError), transaction.atomic():
        VersionCombination.objects.filter(pk=combination.pk).update(state="halted")
    with pytest.raises(IntegrityError), transaction.atomic():
        VersionCombination.objects.filter(pk=combination.pk).update(state="shadow")


def test_a_rollout_abort_retires_its_candidate_with_the_reason(tenant) -> None:
    from ledger.combinations import rollouts

    _baseline(tenant)
    candidate = _new(tenant)
    plan = rollouts.create_plan(
        tenant=tenant,
        candidate_id=candidate.pk,
        steps=[rollouts.StepSpec(1000, 0, 0), rollouts.StepSpec(10_000, 0, 0)],
        actor="test",
        source="api",
    )
    rollouts.act_on_plan(
        tenant=tenant, plan_id=plan.pk, action="abort", actor="test", source="api", reason="no"
    )
    assert VersionCombination.objects.get(pk=candidate.pk).state == "retired"
    event = AuditEvent.objects.get(action="combination.retired", target_id=str(candidate.pk))
    assert event.detail == f"rollout plan {plan.pk} aborted: no"
