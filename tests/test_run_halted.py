"""Whether a run may start more actions: ``Run.halted`` (read by the call path and the approvals)
and its query form ``Run.halted_q`` (read by the lists of open approvals) agree for every run
status and every state of the run's combination, also through a relation's prefix."""

from __future__ import annotations

import pytest
from django.db.models.functions import Now

from ledger.models import LedgerEntry, Run, VersionCombination
from tests.factories import make_entry, make_tenant, make_tool

pytestmark = pytest.mark.django_db

COMBINATION_STATES = [None, *VersionCombination.State]


def _combination(tenant_id: int, state: str) -> VersionCombination:
    parts = {"model": "m", "prompt": "p", "rules": "r", "tool_schema": "t", "data_version": state}
    halted = state == VersionCombination.State.HALTED
    shadow = state == VersionCombination.State.SHADOW
    return VersionCombination.objects.create(
        tenant_id=tenant_id,
        label=state,
        fingerprint=VersionCombination.compute_fingerprint(**parts),
        state=state,
        halted_from=VersionCombination.State.ACTIVE if halted else "",
        shadowed_from=VersionCombination.State.NEW if shadow else "",
        **parts,
    )


@pytest.mark.parametrize("status", list(Run.Status))
@pytest.mark.parametrize("combination_state", COMBINATION_STATES)
def test_halted_and_its_query_agree(status: str, combination_state: str | None) -> None:
    tenant = make_tenant()
    entry = make_entry(tenant, make_tool(tenant, "send_email"))
    combination = None if combination_state is None else _combination(tenant.pk, combination_state)
    Run.objects.filter(pk=entry.run_id).update(
        status=status,
        combination=combination,
        finished_at=None if status == Run.Status.RUNNING else Now(),
    )
    run = Run.objects.select_related("combination").get(pk=entry.run_id)

    expected = status == Run.Status.HALTED or combination_state == VersionCombination.State.HALTED
    assert run.halted is expected
    assert Run.objects.filter(Run.halted_q(), pk=run.pk).exists() is expected
    through_entries = LedgerEntry.objects.filter(Run.halted_q("run__"), pk=entry.pk)
    assert through_entries.exists() is expected
