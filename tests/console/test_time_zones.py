"""Every time the console shows is in the user's time zone and says which it is: UTC until they
choose one on their settings page, where a zone that does not exist is refused and changes
nothing; the choice follows them to any browser."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.test import Client

from console.models import Preferences
from ledger.models import ApprovalRequest, Tenant
from tests.console.conftest import make_user, signed_in

pytestmark = pytest.mark.django_db
WHEN = datetime(2026, 12, 5, 23, 30, 15, tzinfo=UTC)


@pytest.fixture
def approval(pending: ApprovalRequest) -> ApprovalRequest:
    ApprovalRequest.objects.filter(pk=pending.pk).update(expires_at=WHEN.replace(year=2027))
    return pending


def _expires(html: str) -> str:
    found = re.search(r'data-expires-in="[^"]*"|title="(2027-[^"]+)"', html)
    assert found and found.group(1), html[:500]
    return found.group(1)


def test_times_are_utc_and_say_so_until_the_user_chooses(
    django_user_model, tenant: Tenant, approval: ApprovalRequest
) -> None:
    ann = signed_in(make_user(django_user_model, "ann", tenant, "approver"))
    assert _expires(ann.get("/approvals/").content.decode()) == "2027-12-05 23:30:15 UTC"


def test_a_chosen_zone_shifts_every_time_and_names_it(
    django_user_model, tenant: Tenant, approval: ApprovalRequest
) -> None:
    ann_user = make_user(django_user_model, "ann", tenant, "approver")
    ann = signed_in(ann_user)
    saved = ann.post("/preferences/", {"language": "en", "time_zone": "Asia/Shanghai"})
    assert saved.status_code == 302
    assert Preferences.objects.get(user=ann_user).time_zone == "Asia/Shanghai"
    assert _expires(ann.get("/approvals/").content.decode()) == "2027-12-06 07:30:15 CST"
    # Another browser: the zone follows the user.
    other = Client()
    other.force_login(ann_user)
    assert _expires(other.get("/approvals/").content.decode()) == "2027-12-06 07:30:15 CST"
    page = other.get(f"/approvals/{approval.pk}/").content.decode()
    assert 'data-time-zone="Asia/Shanghai"' in page and " CST" in page


@pytest.mark.parametrize("zone", ["Mars/Olympus", "", "UTC+8", "../etc/passwd", "x" * 300])
def test_a_zone_that_does_not_exist_is_refused_and_changes_nothing(
    django_user_model, tenant: Tenant, zone: str
) -> None:
    user = make_user(django_user_model, "ann", tenant, "approver")
    client = signed_in(user)
    refused = client.post("/preferences/", {"language": "en", "time_zone": zone})
    assert refused.status_code == 400
    assert "Choose one of the time zones offered." in refused.content.decode()
    assert not Preferences.objects.filter(user=user).exists()
    assert 'data-time-zone="UTC"' in client.get("/").content.decode()


def test_the_settings_page_shows_what_the_user_chose(django_user_model, tenant: Tenant) -> None:
    client = signed_in(make_user(django_user_model, "ann", tenant, "operator"))
    client.post("/preferences/", {"language": "zh-hans", "time_zone": "Europe/Berlin"})
    page = client.get("/preferences/").content.decode()
    assert '<option value="Europe/Berlin" selected>' in page
    assert '<option value="zh-hans" lang="zh-hans" selected>' in page
