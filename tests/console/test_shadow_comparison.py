"""The shadow comparison pages: pairs, step differences, and verdicts per threshold."""

from __future__ import annotations

import pytest
from django.urls import reverse

from ledger.combinations import comparison
from ledger.combinations.comparison import Step, pair_steps
from ledger.models import Run
from ledger.services import metrics
from tests.api.conftest import client_for
from tests.console.conftest import make_shadow_pair, make_user, signed_in

pytestmark = pytest.mark.django_db


def _step(tool: str = "create_order", decision: str = "execute", effect: str = "") -> Step:
    return Step(tool=tool, idempotency="non_idempotent", decision=decision, side_effect=effect)


def test_steps_pair_in_order_and_say_what_differs() -> None:
    pairs = pair_steps(
        [_step(effect="succeeded"), _step("charge_customer")],
        [_step(decision="shadow_dry_run", effect="intended")],
    )
    assert [p.number for p in pairs] == [1, 2]
    assert pairs[0].differs == {"decision", "side_effect"}
    assert pairs[1].shadow is None and pairs[1].differs == {
        "tool",
        "idempotency",
        "decision",
        "side_effect",
    }
    same = pair_steps([_step()], [_step()])
    assert not same[0].differs


def test_a_manager_sees_each_shadow_run_beside_its_live_run(django_user_model, tenant) -> None:
    make_shadow_pair(tenant)
    manager = signed_in(make_user(django_user_model, "boss", tenant, "manager"))
    page = manager.get(reverse("console:shadow_pairs"), secure=True)
    assert page.status_code == 200
    text = page.content.decode()
    assert "shadow-1" in text and "run-1" in text
    shadow = Run.objects.get(run_id="shadow-1")
    detail = manager.get(reverse("console:shadow_pair", args=[shadow.pk]), secure=True)
    assert detail.status_code == 200
    html = detail.content.decode()
    assert html.count('class="differs"') == 2  # the order (a dry run) and the charge
    assert "charge_customer" in html and "shadow dry run" in html
    assert "intended (dry run)" in html


def test_every_step_where_the_decisions_differ_is_listed(tenant) -> None:
    make_shadow_pair(tenant)
    (pair,) = comparison.shadow_pairs(tenant)
    differing = [(s.number, s.live.tool if s.live else None) for s in pair.differing]
    assert differing == [(2, "create_order"), (3, "charge_customer")]
    assert pair.steps[0].live == pair.steps[0].shadow  # the read is the same in both


def test_the_shadow_is_judged_against_each_threshold(django_user_model, tenant) -> None:
    make_shadow_pair(tenant)
    api = client_for(tenant)
    for metric, above in (("uncertain_results", 0), ("dedup_hit_rate", 0.5)):
        created = api.post("/thresholds", {"metric": metric, "above": above, "action": "halt"})
        assert created.status_code == 201
    shadow_read = Run.objects.get(run_id="shadow-1").entries.get(tool__name="read_file")
    api.post(f"/calls/{shadow_read.call_id}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    metrics.roll_up()
    (pair,) = comparison.shadow_pairs(tenant)
    rows = {
        row.metric: row
        for row in comparison.metric_verdicts(
            tenant, live_id=pair.live.combination_id, shadow_id=pair.shadow.combination_id
        )
    }
    assert rows["uncertain_results"].verdict == "crossed" and rows["uncertain_results"].shadow == 1
    assert rows["dedup_hit_rate"].verdict == "too_few_samples"
    assert rows["duplicate_side_effects"].verdict == "no_threshold"
    # A rate reads as a percentage, as on every other page; a count without decimals.
    manager = signed_in(make_user(django_user_model, "boss", tenant, "manager"))
    html = manager.get(reverse("console:shadow_pairs"), secure=True).content.decode()
    assert "&gt; 50.0%" in html and "&gt; 0.5" not in html
    assert "&gt; 0 ·" in html  # the uncertain-results threshold
    assert rows["approvals"].live == 0 and rows["rejections"].shadow == 0


@pytest.mark.parametrize("role", ["operator", "approver"])
def test_only_managers_see_the_comparison(django_user_model, tenant, role: str) -> None:
    make_shadow_pair(tenant)
    other = signed_in(make_user(django_user_model, role, tenant, role))
    shadow = Run.objects.get(run_id="shadow-1")
    assert other.get(reverse("console:shadow_pairs"), secure=True).status_code == 403
    url = reverse("console:shadow_pair", args=[shadow.pk])
    assert other.get(url, secure=True).status_code == 403


def test_another_tenants_shadow_run_is_not_found(django_user_model, tenant, other_tenant) -> None:
    make_shadow_pair(other_tenant)
    manager = signed_in(make_user(django_user_model, "boss", tenant, "manager"))
    shadow = Run.objects.get(run_id="shadow-1")
    url = reverse("console:shadow_pair", args=[shadow.pk])
    assert manager.get(url, secure=True).status_code == 404
    live = Run.objects.get(run_id="run-1")  # a live run is not a shadow pair either
    own = signed_in(make_user(django_user_model, "boss2", other_tenant, "manager"))
    assert own.get(reverse("console:shadow_pair", args=[live.pk]), secure=True).status_code == 404
    assert manager.post(reverse("console:shadow_pairs"), secure=True).status_code == 405
