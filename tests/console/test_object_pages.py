"""A page for an action (its idempotency record), a version combination and an audit event, and
deep links to them wherever their ids are shown, for the roles that open them. Roles and the
other tenant's ids are in test_access_matrix.py and tests/test_tenant_scope.py."""

from __future__ import annotations

import pytest

from ledger import combinations
from ledger.combinations import rollouts
from ledger.models import AuditEvent, LedgerEntry, VersionCombination
from ledger.services.audit import audit
from tests.api.conftest import client_for
from tests.console.conftest import make_pending, make_user, signed_in

pytestmark = pytest.mark.django_db

SECRET = "sk_live_0123456789abcdefghij"


def test_an_actions_page_shows_its_record_and_everything_under_it(django_user_model, tenant):
    approval = make_pending(tenant, path="orders.py", run_id="run-rec")
    record = approval.record
    record.refresh_from_db()
    entries = list(LedgerEntry.objects.filter(record=record).order_by("pk"))
    operator = signed_in(make_user(django_user_model, "op", tenant, "operator"))
    response = operator.get(f"/ledger/records/{record.pk}/", secure=True)
    assert response.status_code == 200
    html = response.content.decode()
    assert record.key in html and record.fingerprint in html
    assert f'<dd class="mono">{record.fencing_token}</dd>' in html
    assert f"{record.executions} · " in html
    assert "orders.py" in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # the plan
    assert "<script>alert(1)" not in html
    for entry in entries:  # the calls under it, linked to their pages
        assert f'href="/ledger/calls/{entry.pk}/"' in html
    assert f'href="/ledger/runs/{record.run_id}/"' in html
    assert "approval.requested" in html  # the timeline
    # An operator does not open approvals: the approval is named, not linked.
    assert f"#{approval.pk}" in html and f'href="/approvals/{approval.pk}/"' not in html
    approver = signed_in(make_user(django_user_model, "al", tenant, "approver"))
    html = approver.get(f"/ledger/records/{record.pk}/", secure=True).content.decode()
    assert f'href="/approvals/{approval.pk}/"' in html


def test_keys_link_to_their_actions_page(django_user_model, tenant):
    approval = make_pending(tenant, run_id="run-keys")
    link = f'href="/ledger/records/{approval.record_id}/"'
    manager = signed_in(make_user(django_user_model, "ma", tenant, "manager"))
    assert link in manager.get("/ledger/", secure=True).content.decode()
    assert link in manager.get(f"/ledger/calls/{approval.entry_id}/", secure=True).content.decode()
    approver = signed_in(make_user(django_user_model, "al", tenant, "approver"))
    assert link in approver.get(f"/approvals/{approval.pk}/", secure=True).content.decode()
    assert link in approver.get("/audit/", secure=True).content.decode()  # an audit target


def test_a_combinations_page_shows_its_versions_lifecycle_rollout_runs_and_audit(
    django_user_model, tenant, combos
):
    good, bad = combos
    candidate, _ = combinations.create_combination(
        tenant=tenant,
        label="next",
        actor="x",
        source="api",
        model="m2",
        prompt="p",
        rules="r",
        tool_schema="t",
        data_version="d9",
    )
    plan = rollouts.create_plan(
        tenant=tenant,
        candidate_id=candidate.pk,
        steps=[rollouts.StepSpec(2500), rollouts.StepSpec(10_000)],
        actor="x",
        source="api",
    )
    api = client_for(tenant)
    api.start_run("run-under-bad")
    manager = signed_in(make_user(django_user_model, "ma", tenant, "manager"))
    html = manager.get(f"/combinations/{candidate.pk}/", secure=True).content.decode()
    for version in ("m2", "d9"):
        assert f'<dd class="mono">{version}</dd>' in html
    assert "25%" in html and "2500 bp" in html  # the canary share its rollout gave it
    assert f'href="/rollouts/{plan.pk}/"' in html
    assert "combination.canary" in html  # the audit timeline
    # The changes its state allows, each a page that says what it changes.
    assert f'href="/combinations/{candidate.pk}/promote"' in html
    assert f'href="/combinations/{candidate.pk}/retire"' in html
    html = manager.get(f"/combinations/{bad.pk}/", secure=True).content.decode()
    assert "run-under-bad" in html and f'href="/combinations/{good.pk}/"' in html  # replaced
    assert (
        f'href="/combinations/{candidate.pk}/"'
        in manager.get("/combinations/", secure=True).content.decode()
    )


def test_an_action_on_a_combinations_page_returns_to_it(django_user_model, tenant, combos):
    _good, bad = combos
    manager = signed_in(make_user(django_user_model, "ma", tenant, "manager"))
    done = manager.post(f"/combinations/{bad.pk}/halt", {"reason": "dup spike"}, secure=True)
    assert done.status_code == 302 and done.url == f"/combinations/{bad.pk}/"
    assert VersionCombination.objects.get(pk=bad.pk).state == "halted"
    html = manager.get(done.url, secure=True).content.decode()
    assert "dup spike" in html and f'href="/combinations/{bad.pk}/resume"' in html
    assert "resuming it returns it to active" in html


def test_combination_names_link_only_for_roles_that_open_the_page(
    django_user_model, tenant, combos
):
    _good, bad = combos
    api = client_for(tenant)
    api.start_run("run-linked")
    link = f'href="/combinations/{bad.pk}/"'
    manager = signed_in(make_user(django_user_model, "ma", tenant, "manager"))
    operator = signed_in(make_user(django_user_model, "op", tenant, "operator"))
    assert link in manager.get("/ledger/runs/", secure=True).content.decode()
    assert link not in operator.get("/ledger/runs/", secure=True).content.decode()
    assert "bad" in operator.get("/ledger/runs/", secure=True).content.decode()


def test_an_audit_events_page_links_its_target_and_redacts_what_it_recorded(
    django_user_model, tenant, combos
):
    _good, bad = combos
    event = audit(
        tenant=tenant,
        actor="maria",
        action="combination.noted",
        target=bad,
        source="console",
        before={"api_key": "plain-key-value", "fencing_token": 41},
        after={"note": f"token {SECRET} and mail ops@example.com", "fencing_token": 42},
        detail=f"saw {SECRET}",
    )
    manager = signed_in(make_user(django_user_model, "ma", tenant, "manager"))
    response = manager.get(f"/audit/{event.pk}/", secure=True)
    assert response.status_code == 200
    html = response.content.decode()
    assert "maria" in html and "combination.noted" in html
    assert f'href="/combinations/{bad.pk}/"' in html
    assert "plain-key-value" not in html and SECRET not in html and "ops@example.com" not in html
    assert "[REDACTED" in html
    # A fencing token is not a secret.
    assert "&quot;fencing_token&quot;: 41" in html and "&quot;fencing_token&quot;: 42" in html
    assert f'href="/audit/{event.pk}/"' in manager.get("/audit/", secure=True).content.decode()
    stored = AuditEvent.objects.get(pk=event.pk)
    assert stored.before == {"api_key": "[REDACTED]", "fencing_token": 41}
    assert SECRET not in stored.detail and SECRET not in str(stored.after)


def test_an_audit_event_stored_unredacted_is_shown_redacted(django_user_model, tenant, combos):
    """The log is append-only: an event written under narrower rules keeps what it was
    written with, and its page redacts it as it shows it."""
    _good, bad = combos
    event = AuditEvent.objects.create(
        tenant=tenant,
        actor="maria",
        action="combination.noted",
        target_type="versioncombination",
        target_id=str(bad.pk),
        source="console",
        before={"pwd": "plain-pwd-value"},
        after={"url": "https://deploy:plain-url-password@git.example.com/"},
        detail="saw ?token=plain-query-token",
    )
    manager = signed_in(make_user(django_user_model, "ma", tenant, "manager"))
    html = manager.get(f"/audit/{event.pk}/", secure=True).content.decode()
    assert "maria" in html
    assert "plain-pwd-value" not in html and "plain-url-password" not in html
    assert "plain-query-token" not in html
