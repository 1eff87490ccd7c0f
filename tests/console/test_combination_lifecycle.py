"""A combination's life from the console: promote a canary, resume a halted combination (with
a reason, audited), retire a canary; rolling back the only combination says what to do."""

from __future__ import annotations

import pytest
from django.test import Client

from ledger.models import AuditEvent, VersionCombination
from ledger.services import combinations
from tests.console.conftest import make_user, signed_in

pytestmark = pytest.mark.django_db

VERSIONS = {"model": "m", "prompt": "p", "rules": "r", "tool_schema": "t", "data_version": "d"}


@pytest.fixture
def manager(django_user_model, tenant):
    return signed_in(make_user(django_user_model, "mgr", tenant, "manager"))


def _act(client, combination, **data):
    return client.post(f"/combinations/{combination.pk}/action", data, secure=True, follow=True)


def _state(combination) -> str:
    return VersionCombination.objects.get(pk=combination.pk).state


def test_a_canary_is_promoted_with_a_reason(manager, tenant, combos):
    good, bad = combos  # bad is active, good retired
    combinations.set_canary(
        tenant=tenant, combination_id=good.pk, share_bp=1000, actor="x", source="api"
    )
    refused = _act(manager, good, action="promote", reason="")
    assert _state(good) == "canary" and "Say why" in refused.content.decode()
    _act(manager, good, action="promote", reason="canary looks healthy")
    assert _state(good) == "active" and _state(bad) == "retired"
    event = AuditEvent.objects.filter(
        action="combination.activated", target_id=str(good.pk)
    ).latest("pk")
    assert event.detail == "canary looks healthy" and event.actor == "mgr"


def test_a_halted_combination_is_resumed_and_only_a_halted_one(manager, tenant, combos):
    _good, bad = combos
    combinations.halt(tenant=tenant, combination_id=bad.pk, actor="x", source="api", reason="r")
    _act(manager, bad, action="resume", reason="the bad rule is fixed")
    assert _state(bad) == "active"
    again = _act(manager, bad, action="resume", reason="twice")
    assert "Only a halted combination can be resumed." in again.content.decode()


def test_a_canary_is_retired(manager, tenant, combos):
    good, _bad = combos
    combinations.set_canary(
        tenant=tenant, combination_id=good.pk, share_bp=500, actor="x", source="api"
    )
    _act(manager, good, action="retire")
    assert _state(good) == "retired"


def test_rolling_back_the_only_combination_says_what_to_do(manager, tenant):
    only, _ = combinations.create_combination(
        tenant=tenant, label="only", actor="x", source="api", **VERSIONS
    )
    combinations.activate(tenant=tenant, combination_id=only.pk, actor="x", source="api")
    page = manager.get(f"/combinations/{only.pk}/rollback", secure=True)
    assert page.status_code == 200
    html = page.content.decode()
    assert "There is no other combination to restore" in html
    assert "halt it" in html and "POST /api/v1/combinations" in html
    assert "no previous combination to restore; name one" not in html
    assert _state(only) == "active"


def _shadow_events(combination) -> list[AuditEvent]:
    return list(
        AuditEvent.objects.filter(
            action__in=["combination.shadow", "combination.canary"], target_id=str(combination.pk)
        ).order_by("pk")
    )


def test_a_manager_puts_a_candidate_in_shadow_sets_its_share_and_takes_it_out(
    manager, tenant, combos
):
    good, _bad = combos  # good is retired
    page = _act(manager, good, action="shadow", share_bp="2500", reason="try prompt v2")
    assert "In shadow" in page.content.decode()
    shadowed = VersionCombination.objects.get(pk=good.pk)
    assert (shadowed.state, shadowed.canary_share_bp) == ("shadow", 2500)
    _act(manager, good, action="shadow", share_bp="10000", reason="all of them now")
    assert VersionCombination.objects.get(pk=good.pk).canary_share_bp == 10_000
    _act(manager, good, action="unshadow", reason="seen enough")
    assert _state(good) == "retired"
    put, widened, out = _shadow_events(good)
    assert [e.after["canary_share_bp"] for e in (put, widened, out)] == [2500, 10_000, 0]
    assert [e.detail for e in (put, widened, out)] == [
        "try prompt v2",
        "all of them now",
        "seen enough",
    ]
    assert {(e.actor, e.source) for e in (put, widened, out)} == {("mgr", "console")}


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"share_bp": "5000", "reason": " "}, "Say why"),
        ({"share_bp": "half", "reason": "r"}, "whole number of basis points"),
        ({"share_bp": "10001", "reason": "r"}, "0 to 10000"),
    ],
)
def test_a_bad_put_in_shadow_is_refused_and_changes_nothing(manager, combos, data, says):
    good, _bad = combos
    page = _act(manager, good, action="shadow", **data)
    assert says in page.content.decode()
    assert _state(good) == "retired" and _shadow_events(good) == []


def test_the_active_combination_cannot_be_put_in_or_taken_out_of_shadow(manager, combos):
    _good, bad = combos  # bad is active
    assert (
        "cannot be put in shadow"
        in _act(manager, bad, action="shadow", share_bp="100", reason="r").content.decode()
    )
    assert (
        "Only a combination in shadow"
        in _act(manager, bad, action="unshadow", reason="r").content.decode()
    )
    assert _state(bad) == "active"


def test_only_a_manager_of_the_tenant_puts_a_combination_in_shadow(
    django_user_model, tenant, other_tenant, combos
):
    good, _bad = combos
    operator = signed_in(make_user(django_user_model, "op", tenant, "operator"))
    stranger = signed_in(make_user(django_user_model, "them", other_tenant, "manager"))
    data = {"action": "shadow", "share_bp": "100", "reason": "r"}
    url = f"/combinations/{good.pk}/action"
    assert operator.post(url, data, secure=True).status_code == 403
    assert stranger.post(url, data, secure=True).status_code == 404
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(make_user(django_user_model, "mgr2", tenant, "manager"))
    assert strict.post(url, data, secure=True).status_code == 403
    assert _state(good) == "retired" and _shadow_events(good) == []
