"""A combination's life from the console: each change is a page that says what it will change,
then a POST with a reason (audited) that does it and says what it did. A halted canary resumes
as the canary it was; a halt names the approvals it voids and the runs it stops; retiring needs
a reason and is a retirement; out of shadow is back where it came from."""

from __future__ import annotations

import pytest
from django.test import Client

from console.models import Preferences
from ledger import combinations
from ledger.models import ApprovalRequest, AuditEvent, Run, VersionCombination
from ledger.services.runs import pick_combination
from tests.api.conftest import client_for
from tests.console.conftest import make_pending, make_user, signed_in

pytestmark = pytest.mark.django_db

VERSIONS = {"model": "m", "prompt": "p", "rules": "r", "tool_schema": "t", "data_version": "d"}


@pytest.fixture
def manager(django_user_model, tenant):
    return signed_in(make_user(django_user_model, "mgr", tenant, "manager"))


def _url(combination, change: str) -> str:
    return f"/combinations/{combination.pk}/{change}"


def _post(client, combination, change: str, **data):
    return client.post(_url(combination, change), data, secure=True)


def _done(client, combination, change: str, **data) -> str:
    """POST a change that succeeds; the page it returns to, with its message."""
    response = _post(client, combination, change, **data)
    assert response.status_code == 302, response.content.decode()[:2000]
    return client.get(response["Location"], secure=True).content.decode()


def _stored(combination) -> VersionCombination:
    return VersionCombination.objects.get(pk=combination.pk)


def _state(combination) -> str:
    return _stored(combination).state


def _canary(tenant, combos, share_bp: int = 1000) -> VersionCombination:
    """``good`` (retired) made a canary of ``share_bp`` beside ``bad``, the active one."""
    good, _bad = combos
    return combinations.set_canary(
        tenant=tenant, combination_id=good.pk, share_bp=share_bp, actor="x", source="api"
    )


def test_halting_a_canary_and_resuming_it_gives_back_the_canary_at_its_share(
    manager, tenant, combos
) -> None:
    canary = _canary(tenant, combos)
    _good, baseline = combos
    _done(manager, canary, "halt", reason="error spike")
    assert (_state(canary), _state(baseline)) == ("halted", "active")

    preview = manager.get(_url(canary, "resume"), secure=True)
    html = preview.content.decode()
    assert preview.status_code == 200
    assert "returns to what it was before the halt: a canary at 10% of new runs" in html
    assert "active now, is retired" not in html
    assert _state(canary) == "halted"  # the preview changes nothing

    page = _done(manager, canary, "resume", reason="the spike was the load test")
    assert "Resumed good: it is a canary at 10% of new runs again." in page
    resumed = _stored(canary)
    assert (resumed.state, resumed.canary_share_bp) == ("canary", 1000)
    assert _state(baseline) == "active"
    assert {pick_combination(tenant, f"run-{n}") for n in range(300)} == {resumed, baseline}
    event = AuditEvent.objects.get(action="combination.resumed")
    assert (event.actor, event.source, event.detail) == (
        "mgr",
        "console",
        "the spike was the load test",
    )
    assert (event.before["state"], event.after["state"], event.after["canary_share_bp"]) == (
        "halted",
        "canary",
        1000,
    )


def test_resuming_the_halted_active_combination_says_which_one_it_retires(
    manager, tenant, combos
) -> None:
    good, bad = combos
    combinations.rollback(
        tenant=tenant, combination_id=bad.pk, actor="x", source="api", reason="spike"
    )
    assert (_state(good), _state(bad)) == ("active", "halted")
    html = manager.get(_url(bad, "resume"), secure=True).content.decode()
    assert "returns to what it was before the halt: active" in html
    assert "good, active now, is retired" in html
    page = _done(manager, bad, "resume", reason="false alarm")
    assert "Resumed bad: it is active again; good, active until now, is retired." in page
    assert (_state(good), _state(bad)) == ("retired", "active")


def test_only_a_halted_combination_is_resumed_and_a_second_resume_changes_nothing(
    manager, tenant, combos
) -> None:
    canary = _canary(tenant, combos)
    page = manager.get(_url(canary, "resume"), secure=True).content.decode()
    assert "Only a halted combination can be resumed (good is canary)." in page
    assert 'name="reason"' not in page and 'id="change-effects"' not in page
    refused = _post(manager, canary, "resume", reason="r")
    assert refused.status_code == 409 and _state(canary) == "canary"
    combinations.halt(tenant=tenant, combination_id=canary.pk, actor="x", source="api", reason="r")
    _done(manager, canary, "resume", reason="first click")
    again = _post(manager, canary, "resume", reason="second click")
    assert again.status_code == 409
    assert "Only a halted combination can be resumed" in again.content.decode()
    assert AuditEvent.objects.filter(action="combination.resumed").count() == 1


def test_a_resume_needs_a_reason_and_keeps_what_was_typed(manager, tenant, combos) -> None:
    canary = _canary(tenant, combos)
    combinations.halt(tenant=tenant, combination_id=canary.pk, actor="x", source="api", reason="r")
    refused = _post(manager, canary, "resume", reason="  ")
    assert refused.status_code == 400
    assert "Say why" in refused.content.decode() and _state(canary) == "halted"


def test_the_halt_page_names_the_approvals_it_voids_and_the_runs_it_stops(
    manager, tenant, combos
) -> None:
    _good, bad = combos
    waiting = [make_pending(tenant, path=f"f{n}.py", run_id=f"run-w{n}") for n in range(3)]
    preview = manager.get(_url(bad, "halt"), secure=True)
    html = preview.content.decode()
    assert "3 open approvals will be invalidated" in html
    assert "3 runs in flight: their next calls are refused" in html
    for approval in waiting:  # the approvals page is an approver's: a manager reads the ids
        assert f"Approval #{approval.pk}" in html
        assert f'href="/ledger/records/{approval.record_id}/"' in html
    assert f'href="/ledger/runs/{Run.objects.get(run_id="run-w0").pk}/"' in html
    assert "every new run of this tenant is refused" in html  # it is the active one
    assert set(ApprovalRequest.objects.values_list("state", flat=True)) == {"pending"}

    page = _done(manager, bad, "halt", reason="duplicate orders")
    assert (
        "Halted bad: new runs and calls under it are refused; 3 approvals invalidated; "
        "3 runs in flight are refused their next calls." in page
    )
    assert set(ApprovalRequest.objects.values_list("state", flat=True)) == {"invalidated"}
    assert _stored(bad).halted_from == "active"


def test_retiring_a_canary_asks_a_reason_and_is_audited_as_a_retirement(
    manager, tenant, combos
) -> None:
    canary = _canary(tenant, combos, share_bp=500)
    refused = _post(manager, canary, "retire", reason="")
    assert refused.status_code == 400 and _state(canary) == "canary"
    page = _done(manager, canary, "retire", reason="the candidate lost")
    assert "Retired good: no new run goes to it." in page
    assert _state(canary) == "retired"
    event = AuditEvent.objects.filter(
        action="combination.retired", target_id=str(canary.pk)
    ).latest("pk")
    assert (event.detail, event.before["state"], event.after["state"]) == (
        "the candidate lost",
        "canary",
        "retired",
    )


def test_a_halted_combination_is_retired_with_its_runs_in_flight(manager, tenant, combos) -> None:
    canary = _canary(tenant, combos, share_bp=10_000)
    api = client_for(tenant)
    api.start_run("run-canary")
    assert Run.objects.get(run_id="run-canary").combination_id == canary.pk
    combinations.halt(tenant=tenant, combination_id=canary.pk, actor="x", source="api", reason="r")
    html = manager.get(_url(canary, "retire"), secure=True).content.decode()
    assert "its runs in flight are halted with it" in html and "run-canary" in html
    page = _done(manager, canary, "retire", reason="discard the candidate")
    assert "its 1 run in flight is halted" in page
    assert _state(canary) == "retired"
    assert Run.objects.get(run_id="run-canary").status == "halted"


def test_the_active_combination_is_not_retired_from_its_page(manager, combos) -> None:
    _good, bad = combos
    page = manager.get(_url(bad, "retire"), secure=True).content.decode()
    assert "it is replaced by activating another one, or by rolling it back" in page
    assert 'name="reason"' not in page
    assert _post(manager, bad, "retire", reason="r").status_code == 409
    assert _state(bad) == "active"


def test_a_canary_is_promoted_with_a_reason(manager, tenant, combos) -> None:
    canary = _canary(tenant, combos)
    _good, baseline = combos
    html = manager.get(_url(canary, "promote"), secure=True).content.decode()
    assert "bad, active now, is retired" in html
    page = _done(manager, canary, "promote", reason="canary looks healthy")
    assert "good is active; bad, which it replaces, is retired." in page
    assert (_state(canary), _state(baseline)) == ("active", "retired")
    event = AuditEvent.objects.filter(
        action="combination.activated", target_id=str(canary.pk)
    ).latest("pk")
    assert event.detail == "canary looks healthy" and event.actor == "mgr"


def test_a_manager_puts_a_new_combination_in_shadow_and_takes_it_out_back_to_new(
    manager, tenant, combos
) -> None:
    fresh, _ = combinations.create_combination(
        tenant=tenant, label="fresh", actor="x", source="api", **{**VERSIONS, "model": "m9"}
    )
    assert fresh.state == "new"
    page = _done(manager, fresh, "shadow", share_bp="2500", reason="try prompt v2")
    assert "fresh is in shadow: 25% of live runs are mirrored into it" in page
    assert (_stored(fresh).state, _stored(fresh).canary_share_bp) == ("shadow", 2500)
    _done(manager, fresh, "shadow", share_bp="10000", reason="all of them now")
    assert _stored(fresh).canary_share_bp == 10_000
    html = manager.get(_url(fresh, "unshadow"), secure=True).content.decode()
    assert "It returns to what it was before: new." in html
    page = _done(manager, fresh, "unshadow", reason="seen enough")
    assert "Out of shadow: fresh is new again." in page
    assert _state(fresh) == "new"
    put, widened = AuditEvent.objects.filter(
        action="combination.shadow", target_id=str(fresh.pk)
    ).order_by("pk")
    out = AuditEvent.objects.get(action="combination.unshadowed", target_id=str(fresh.pk))
    assert [e.detail for e in (put, widened, out)] == [
        "try prompt v2",
        "all of them now",
        "seen enough",
    ]
    assert {(e.actor, e.source) for e in (put, widened, out)} == {("mgr", "console")}


@pytest.mark.parametrize(
    ("data", "says", "status"),
    [
        ({"share_bp": "5000", "reason": " "}, "Say why", 400),
        ({"share_bp": "half", "reason": "r"}, "whole number of basis points", 400),
        ({"share_bp": "10001", "reason": "r"}, "0 to 10000", 400),
    ],
)
def test_a_bad_put_in_shadow_is_refused_keeps_what_was_typed_and_changes_nothing(
    manager, combos, data, says, status
) -> None:
    good, _bad = combos
    response = _post(manager, good, "shadow", **data)
    html = response.content.decode()
    assert response.status_code == status and says in html
    assert f'value="{data["share_bp"]}"' in html
    assert _state(good) == "retired"
    assert not AuditEvent.objects.filter(action="combination.shadow").exists()


def test_the_active_combination_cannot_be_put_in_or_taken_out_of_shadow(manager, combos) -> None:
    _good, bad = combos
    assert _post(manager, bad, "shadow", share_bp="100", reason="r").status_code == 409
    refused = _post(manager, bad, "unshadow", reason="r")
    assert refused.status_code == 409
    assert "Only a combination in shadow can be taken out of it" in refused.content.decode()
    assert _state(bad) == "active"


def test_a_canary_share_is_set_with_a_reason(manager, tenant, combos) -> None:
    canary = _canary(tenant, combos)
    page = _done(manager, canary, "canary", share_bp="2500", reason="widen")
    assert "good is a canary: 25% of new runs go to it." in page
    assert _stored(canary).canary_share_bp == 2500


def test_the_list_offers_only_the_changes_each_state_allows(manager, tenant, combos) -> None:
    canary = _canary(tenant, combos)
    _good, active = combos
    html = manager.get("/combinations/", secure=True).content.decode()
    assert f"/combinations/{canary.pk}/promote?back=list" in html
    assert f"/combinations/{canary.pk}/resume" not in html
    assert f"/combinations/{active.pk}/retire" not in html
    assert f"/combinations/{active.pk}/halt?back=list" in html
    combinations.halt(tenant=tenant, combination_id=canary.pk, actor="x", source="api", reason="r")
    html = manager.get("/combinations/", secure=True).content.decode()
    assert f"/combinations/{canary.pk}/resume?back=list" in html
    assert f"/combinations/{canary.pk}/retire?back=list" in html
    assert f"/combinations/{canary.pk}/promote" not in html


def test_a_change_asked_from_the_list_returns_to_the_list(manager, tenant, combos) -> None:
    canary = _canary(tenant, combos)
    response = _post(manager, canary, "halt", reason="r", back="list")
    assert response["Location"] == "/combinations/"


def test_only_a_manager_of_the_tenant_changes_a_combination(
    django_user_model, tenant, other_tenant, combos
) -> None:
    canary = _canary(tenant, combos)
    combinations.halt(tenant=tenant, combination_id=canary.pk, actor="x", source="api", reason="r")
    operator = signed_in(make_user(django_user_model, "op", tenant, "operator"))
    stranger = signed_in(make_user(django_user_model, "them", other_tenant, "manager"))
    url = _url(canary, "resume")
    assert operator.post(url, {"reason": "r"}, secure=True).status_code == 403
    assert operator.get(url, secure=True).status_code == 403
    assert stranger.post(url, {"reason": "r"}, secure=True).status_code == 404
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(make_user(django_user_model, "mgr2", tenant, "manager"))
    assert strict.post(url, {"reason": "r"}, secure=True).status_code == 403
    assert _state(canary) == "halted"
    assert not AuditEvent.objects.filter(action="combination.resumed").exists()


def test_the_change_pages_speak_the_users_language(django_user_model, tenant, combos) -> None:
    canary = _canary(tenant, combos)
    user = make_user(django_user_model, "li", tenant, "manager")
    Preferences.objects.create(user=user, language="zh-hans")
    client = signed_in(user)
    combinations.halt(tenant=tenant, combination_id=canary.pk, actor="x", source="api", reason="r")
    html = client.get(_url(canary, "resume"), secure=True).content.decode()
    assert "good 回到叫停前的状态" in html and "承接 10% 的新运行" in html
    assert "returns to what it was before the halt" not in html
    refused = client.get(_url(canary, "promote"), secure=True).content.decode()
    assert "good 已叫停" in refused and "is halted: resume it" not in refused


def test_the_services_refusals_read_in_the_users_language(
    django_user_model, tenant, combos
) -> None:
    """What the services refuse (a share out of range, a rollback of a new combination, onto
    a halted one) is stored English the console shows in the user's language."""
    good, bad = combos
    fresh, _ = combinations.create_combination(
        tenant=tenant, label="fresh", actor="x", source="api", **{**VERSIONS, "prompt": "p3"}
    )
    user = make_user(django_user_model, "li", tenant, "manager")
    Preferences.objects.create(user=user, language="zh-hans")
    client = signed_in(user)

    share = _post(client, fresh, "canary", share_bp="20000", reason="r").content.decode()
    assert "灰度比例为 1 到 10000 基点" in share and "要结束灰度" in share
    assert "basis points" not in share
    untried = client.get(f"/combinations/{fresh.pk}/rollback", secure=True).content.decode()
    assert "“新建”状态的版本组合不能回滚" in untried and "只有生效中" in untried
    assert "cannot be rolled back" not in untried
    combinations.halt(tenant=tenant, combination_id=good.pk, actor="x", source="api", reason="r")
    onto_halted = client.post(
        f"/combinations/{bad.pk}/rollback",
        {"reason": "spike", "restore": str(good.pk)},
        secure=True,
        follow=True,
    ).content.decode()
    assert onto_halted.count("请改为恢复它") == 2  # the message and the page
    assert "resume it instead" not in onto_halted
    assert (_state(good), _state(bad), _state(fresh)) == ("halted", "active", "new")
