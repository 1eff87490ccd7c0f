"""A combination's life from the console: promote a canary, resume a halted combination (with
a reason, audited), retire a canary; rolling back the only combination says what to do."""

from __future__ import annotations

import pytest

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
