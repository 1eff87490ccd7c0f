"""Sealing the audit log into per-tenant hash chains, and ``manage.py verify_audit`` finding
an edited, a deleted and an inserted event in the database (the trigger bypassed, as only the
table's owner could), and events committed out of id order still forming one chain."""

from __future__ import annotations

import io
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections, transaction

from ledger.audit_chain import GENESIS, Scope, walk
from ledger.models import AuditEvent, Tenant
from ledger.services.audit import audit
from ledger.services.audit_sealing import (
    chain_links,
    seal_audit_events,
    unsealed_older_than,
    verify_chain,
)
from reconcile.tasks import seal_audit_chains
from tests.api.conftest import client_for
from tests.factories import make_tenant


def _note(tenant: Tenant | None, n: int, **fields: object) -> AuditEvent:
    return audit(
        tenant=tenant,
        actor=f"alice-{n}",
        action="test.noted",
        target=("tenant", str(n)),
        source="console",
        before={"n": n},
        after={"n": n + 1, "label": "Zoë"},
        **fields,  # type: ignore[misc]
    )


def _verify(*args: str, **options: object) -> str:
    out = io.StringIO()
    call_command("verify_audit", *args, stdout=out, **options)
    return out.getvalue()


def _broken(*args: str, **options: object) -> str:
    out = io.StringIO()
    with pytest.raises(CommandError, match="broken"):
        call_command("verify_audit", *args, stdout=out, **options)
    return out.getvalue()


@contextmanager
def _triggers_off() -> Iterator[None]:
    """The session's triggers off inside the test's transaction (a replica's session role):
    what someone with a superuser's rights could do to rewrite history."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        yield
        cursor.execute("SET LOCAL session_replication_role = origin")


@pytest.fixture
def sealed(tenant: Tenant) -> list[AuditEvent]:
    """Six sealed events of the tenant, in seq order."""
    for n in range(6):
        _note(tenant, n)
    seal_audit_events()
    return list(AuditEvent.objects.filter(tenant=tenant).order_by("seq"))


@pytest.mark.django_db
def test_sealing_chains_a_tenants_events_in_id_order(sealed: list[AuditEvent]) -> None:
    assert [e.seq for e in sealed] == [1, 2, 3, 4, 5, 6]
    assert [e.pk for e in sealed] == sorted(e.pk for e in sealed)
    assert sealed[0].prev_digest == GENESIS
    assert [e.prev_digest for e in sealed[1:]] == [e.digest for e in sealed[:-1]]


@pytest.mark.django_db
def test_each_tenant_and_the_events_of_none_have_a_chain_of_their_own(
    tenant: Tenant, other_tenant: Tenant
) -> None:
    for n in range(3):
        _note(tenant, n)
        _note(other_tenant, n)
        _note(None, n)
    report = seal_audit_events()
    assert (report.sealed, report.chains, report.busy, report.unfinished) == (9, 3, 0, 0)
    for owner in (tenant, other_tenant, None):
        verdict = verify_chain(owner)
        assert verdict.ok and (verdict.first_seq, verdict.last_seq) == (1, 3)


@pytest.mark.django_db
def test_later_events_continue_the_chain_in_bounded_batches(
    tenant: Tenant, sealed: list[AuditEvent]
) -> None:
    assert seal_audit_events().sealed == 0
    for n in range(7):
        _note(tenant, 10 + n)
    assert seal_audit_events(batch_size=3).sealed == 7
    verdict = verify_chain(tenant)
    assert verdict.ok and verdict.checked == 13


@pytest.mark.django_db
def test_a_pass_is_bounded_and_gives_each_chain_its_turn(
    tenant: Tenant, other_tenant: Tenant
) -> None:
    for n in range(5):
        _note(tenant, n)
        _note(other_tenant, n)
    first = seal_audit_events(batch_size=2, max_batches=3)
    assert (first.sealed, first.chains, first.unfinished) == (6, 2, 2)
    counts = {t.slug: verify_chain(t).checked for t in (tenant, other_tenant)}
    assert sorted(counts.values()) == [2, 4]  # a batch each, then the first one's second
    second = seal_audit_events(batch_size=2, max_batches=10)
    assert (second.sealed, second.unfinished) == (4, 0)
    assert all(verify_chain(t).checked == 5 for t in (tenant, other_tenant))


@pytest.mark.django_db
def test_the_periodic_task_seals_what_was_written(tenant: Tenant) -> None:
    _note(tenant, 1)
    _note(None, 2)
    assert seal_audit_chains() == 2
    assert not AuditEvent.objects.filter(seq__isnull=True).exists()


@pytest.mark.django_db
def test_the_hot_paths_events_seal_and_verify(tenant: Tenant) -> None:
    api = client_for(tenant)
    api.start_run()
    for n in range(3):
        call = api.call("create_order", {"cart": n}, business_object_id=f"o-{n}").json()
        done = api.post(
            f"/calls/{call['call_id']}/complete",
            {"fencing_token": 1, "outcome": "succeeded", "result": {"order": n}},
        )
        assert done.status_code == 200, done.content
    written = AuditEvent.objects.filter(tenant=tenant).count()
    assert written >= 6  # each call's reservation and its completion
    assert seal_audit_events().sealed == written
    assert f"acme: OK, {written} event(s), seq 1 to {written}" in _verify(tenant="acme")


@pytest.mark.django_db
def test_verify_audit_passes_a_clean_chain(sealed: list[AuditEvent]) -> None:
    out = _verify(tenant="acme")
    assert f"acme: OK, 6 event(s), seq 1 to 6, last digest {sealed[-1].digest}" in out
    assert "(no tenant): OK, no sealed events" in _verify()


@pytest.mark.django_db
def test_verify_audit_finds_an_edited_event(sealed: list[AuditEvent]) -> None:
    with _triggers_off():
        AuditEvent.objects.filter(pk=sealed[2].pk).update(actor="mallory")
    out = _broken(tenant="acme")
    assert f"acme: BROKEN, edited at seq 3 (event {sealed[2].pk})" in out
    assert "(2 event(s) before it check out)" in out


@pytest.mark.django_db
def test_verify_audit_finds_edited_changes(sealed: list[AuditEvent]) -> None:
    """``before`` and ``after`` are covered through their digest."""
    with _triggers_off():
        AuditEvent.objects.filter(pk=sealed[4].pk).update(after={"n": 99})
    assert f"edited at seq 5 (event {sealed[4].pk})" in _broken(tenant="acme")


@pytest.mark.django_db
def test_verify_audit_finds_a_deleted_event(sealed: list[AuditEvent]) -> None:
    with _triggers_off():
        AuditEvent.objects.filter(pk=sealed[3].pk).delete()
    assert "acme: BROKEN, missing at seq 4: this seq is missing" in _broken(tenant="acme")


@pytest.mark.django_db
def test_verify_audit_finds_an_inserted_event(tenant: Tenant, sealed: list[AuditEvent]) -> None:
    with _triggers_off():
        forged = AuditEvent.objects.create(
            tenant=tenant,
            actor="mallory",
            action="tool.override_set",
            target_type="tool",
            target_id="1",
            source="console",
            seq=7,
            prev_digest="c" * 64,
            digest="d" * 64,
        )
    assert f"acme: BROKEN, unlinked at seq 7 (event {forged.pk})" in _broken(tenant="acme")


@pytest.mark.django_db
def test_a_break_in_one_chain_leaves_the_others_verified(
    other_tenant: Tenant, sealed: list[AuditEvent]
) -> None:
    _note(other_tenant, 1)
    seal_audit_events()
    with _triggers_off():
        AuditEvent.objects.filter(pk=sealed[0].pk).update(detail="rewritten")
    out = _broken()
    assert "acme: BROKEN, edited at seq 1" in out
    assert "globex: OK, 1 event(s)" in out


@pytest.mark.django_db
def test_unsealed_events_past_the_grace_are_a_warning_not_a_break(tenant: Tenant) -> None:
    _note(tenant, 1)
    assert "warning" not in _verify(tenant="acme")  # just written: within the grace
    out = _verify(tenant="acme", grace=0)
    assert "acme: warning: 1 event(s) older than 0 s not sealed yet" in out
    assert unsealed_older_than(tenant, seconds=0) == 1
    seal_audit_events()
    assert unsealed_older_than(tenant, seconds=0) == 0


@pytest.mark.django_db
def test_verify_audit_names_an_unknown_tenant(tenant: Tenant) -> None:
    with pytest.raises(CommandError, match="no tenant 'nope'"):
        _verify(tenant="nope")


@pytest.mark.django_db(transaction=True)
def test_an_event_committed_after_a_later_one_was_sealed_gets_the_next_seq() -> None:
    tenant = make_tenant("late")
    written, commit = threading.Event(), threading.Event()
    late: list[int] = []

    def slow_transaction() -> None:
        try:
            with transaction.atomic():
                late.append(_note(tenant, 1).pk)
                written.set()
                commit.wait(10)
        finally:
            connections.close_all()

    thread = threading.Thread(target=slow_transaction)
    thread.start()
    assert written.wait(10)
    early = _note(tenant, 2)  # a larger id, committed first
    assert seal_audit_events().sealed == 1
    commit.set()
    thread.join()
    assert seal_audit_events().sealed == 1
    chain = [link.content.event_id for link in chain_links(tenant)]
    assert late[0] < early.pk and chain == [early.pk, late[0]]
    assert verify_chain(tenant).ok


@pytest.mark.django_db(transaction=True)
def test_events_written_and_sealed_concurrently_form_one_chain() -> None:
    """Writers in short transactions of random length (commits out of id order) while two
    sealers run over and over: at the end every event has its place, 1..N, and the chain
    walks clean."""
    tenant = make_tenant("busy")
    writing = threading.Event()
    writing.set()
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        rng = random.Random(w)
        try:
            for n in range(25):
                with transaction.atomic():
                    _note(tenant, w * 100 + n)
                    time.sleep(rng.random() * 0.004)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    def sealer() -> None:
        try:
            while writing.is_set():
                seal_audit_events(batch_size=7)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    writers = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    sealers = [threading.Thread(target=sealer) for _ in range(2)]
    for thread in [*writers, *sealers]:
        thread.start()
    for thread in writers:
        thread.join()
    writing.clear()
    for thread in sealers:
        thread.join()
    assert not errors, errors
    seal_audit_events()
    links = list(chain_links(tenant))
    assert [link.seq for link in links] == list(range(1, 101))
    assert {link.content.event_id for link in links} == set(
        AuditEvent.objects.filter(tenant=tenant).values_list("pk", flat=True)
    )
    assert walk(links, scope=Scope.WHOLE).ok
