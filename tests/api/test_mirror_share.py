"""Which live runs a runtime mirrors: each run's ``mirror`` names the shadow run to start when
its id falls in the share of the combination in shadow, decided by the ledger by run id."""

from __future__ import annotations

import pytest

from ledger import combinations
from ledger.models import AuditEvent, Tenant, VersionCombination
from tests.api.conftest import ApiClient
from tests.api.test_shadow_runs import _combination

pytestmark = pytest.mark.django_db


@pytest.fixture
def candidate(tenant: Tenant) -> VersionCombination:
    baseline = _combination(tenant, "baseline")
    combinations.activate(tenant=tenant, combination_id=baseline.pk, actor="test", source="system")
    return _combination(tenant, "candidate")


def _shadow(api: ApiClient, combination: VersionCombination, **body: object) -> dict:
    response = api.post(f"/combinations/{combination.pk}/shadow", body)
    assert response.status_code == 200, response.content
    return response.json()


def _mirrored(api: ApiClient, count: int) -> list[dict]:
    return [api.start_run(f"live-{index}")["mirror"] for index in range(count)]


def test_a_live_run_is_not_mirrored_without_a_combination_in_shadow(
    api: ApiClient, candidate: VersionCombination
) -> None:
    assert _mirrored(api, 5) == [None] * 5


def test_every_live_run_is_mirrored_by_default(
    api: ApiClient, candidate: VersionCombination
) -> None:
    response = api.post(f"/combinations/{candidate.pk}/shadow", raw="")  # no body at all
    assert response.status_code == 200, response.content
    shadowed = response.json()
    assert (shadowed["state"], shadowed["canary_share_bp"]) == ("shadow", 10_000)
    mirrors = _mirrored(api, 5)
    assert mirrors == [
        {"run_id": f"live-{index}.shadow", "combination_id": candidate.pk} for index in range(5)
    ]


def test_a_share_mirrors_that_part_of_the_live_runs_the_same_way_every_time(
    api: ApiClient, candidate: VersionCombination
) -> None:
    _shadow(api, candidate, share_bp=2_500, reason="a quarter first")
    mirrors = _mirrored(api, 400)
    assert 60 <= sum(m is not None for m in mirrors) <= 140  # about 100 of 400
    again = [api.get(f"/runs/live-{index}").json()["mirror"] for index in range(400)]
    assert again == mirrors
    event = AuditEvent.objects.filter(action="combination.shadow").latest("pk")
    assert (event.after["canary_share_bp"], event.detail) == (2_500, "a quarter first")


def test_a_shadow_run_is_not_mirrored_itself(api: ApiClient, candidate: VersionCombination) -> None:
    _shadow(api, candidate)
    mirror = api.start_run("live-1")["mirror"]
    shadow = api.post(
        "/runs",
        {"run_id": mirror["run_id"], "user_id": "u1", "shadow": True, "mirrors_run_id": "live-1"},
    ).json()
    assert (shadow["shadow_of"], shadow["mirror"]) == ("live-1", None)


def test_a_share_of_zero_mirrors_nothing_and_unshadow_takes_it_out_of_shadow(
    api: ApiClient, candidate: VersionCombination
) -> None:
    _shadow(api, candidate, share_bp=0)
    assert _mirrored(api, 20) == [None] * 20
    _shadow(api, candidate)
    out = api.post(f"/combinations/{candidate.pk}/unshadow", {"reason": "seen enough"}).json()
    assert out["state"] == "new"
    assert api.start_run("live-x")["mirror"] is None


@pytest.mark.parametrize("body", [{"share_bp": 10_001}, {"share_bp": -1}, {"share": 5}])
def test_a_bad_shadow_share_is_refused_and_changes_nothing(
    api: ApiClient, candidate: VersionCombination, body: dict
) -> None:
    response = api.post(f"/combinations/{candidate.pk}/shadow", body)
    assert response.status_code == 400, response.content
    assert VersionCombination.objects.get(pk=candidate.pk).state == "new"


def test_the_mirror_of_a_live_run_with_the_longest_id_is_a_valid_run_id(
    api: ApiClient, candidate: VersionCombination
) -> None:
    _shadow(api, candidate)
    live_id = "l" * 200
    mirror = api.start_run(live_id)["mirror"]
    assert len(mirror["run_id"]) <= 200 and mirror["run_id"] != live_id
    shadow = api.post(
        "/runs",
        {"run_id": mirror["run_id"], "user_id": "u1", "shadow": True, "mirrors_run_id": live_id},
    )
    assert shadow.status_code == 201, shadow.content
