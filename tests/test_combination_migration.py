"""Migration 0020 maps the combinations of the old lifecycle (where a new combination was
``retired``) from their history: never run is ``new``, a halted one knows what it halted from,
one in shadow where it came from."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = [("ledger", "0019_record_data_classification")]
AFTER = [("ledger", "0020_combination_lifecycle")]


def _migrate(targets: list[tuple[str, str]]) -> Any:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def _migrate_to_latest() -> None:
    """Every app at its newest migration again: the tests after this one in the same process
    share its database, and a column a later migration adds must be there for them."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_old_rows_are_mapped_from_their_history() -> None:
    apps = _migrate(BEFORE)
    try:
        Tenant = apps.get_model("ledger", "Tenant")
        Combination = apps.get_model("ledger", "VersionCombination")
        AuditEvent = apps.get_model("ledger", "AuditEvent")
        tenant = Tenant.objects.create(slug="acme", name="Acme")
        made: dict[str, Any] = {}

        def combination(label: str, state: str, **fields: Any) -> Any:
            made[label] = Combination.objects.create(
                tenant=tenant,
                label=label,
                model=label,
                prompt="p",
                rules="r",
                tool_schema="t",
                data_version="d",
                fingerprint=f"{len(made):064x}",
                state=state,
                **fields,
            )
            return made[label]

        def event(label: str, action: str, before: dict | None, after: dict | None) -> None:
            AuditEvent.objects.create(
                tenant=tenant,
                actor="x",
                action=action,
                target_type="versioncombination",
                target_id=str(made[label].pk),
                before=before,
                after=after,
                source="api",
            )

        now = timezone.now()
        combination("fresh", "retired")
        combination("replaced", "retired", activated_at=now)
        combination("old-canary", "retired")
        event(
            "old-canary",
            "combination.canary",
            {"state": "retired"},
            {"state": "canary", "canary_share_bp": 700},
        )
        event(
            "old-canary",
            "combination.canary",
            {"state": "canary"},
            {"state": "retired", "canary_share_bp": 0},
        )
        combination("halted-canary", "halted", halted_at=now)
        event(
            "halted-canary",
            "combination.canary",
            {"state": "retired"},
            {"state": "canary", "canary_share_bp": 1200},
        )
        event("halted-canary", "combination.halted", None, {"state": "halted"})
        combination("halted-active", "halted", activated_at=now, halted_at=now)
        event("halted-active", "combination.activated", {"state": "retired"}, {"state": "active"})
        event("halted-active", "combination.halted", None, {"state": "halted"})
        combination("halted-untouched", "halted", halted_at=now)
        combination("shadow-of-new", "shadow", canary_share_bp=2500)
        event(
            "shadow-of-new",
            "combination.shadow",
            {"state": "retired", "canary_share_bp": 0},
            {"state": "shadow", "canary_share_bp": 2500},
        )
        combination("shadow-of-canary", "shadow", canary_share_bp=10_000)
        event(
            "shadow-of-canary",
            "combination.canary",
            {"state": "retired"},
            {"state": "canary", "canary_share_bp": 300},
        )
        event(
            "shadow-of-canary",
            "combination.shadow",
            {"state": "canary", "canary_share_bp": 300},
            {"state": "shadow", "canary_share_bp": 5000},
        )
        event(
            "shadow-of-canary",
            "combination.shadow",
            {"state": "shadow", "canary_share_bp": 5000},
            {"state": "shadow", "canary_share_bp": 10_000},
        )

        apps = _migrate(AFTER)
        Combination = apps.get_model("ledger", "VersionCombination")
        rows = {
            c.label: (
                c.state,
                c.halted_from,
                c.halted_from_share_bp,
                c.shadowed_from,
                c.shadowed_from_share_bp,
            )
            for c in Combination.objects.all()
        }
        assert rows == {
            "fresh": ("new", "", 0, "", 0),
            "replaced": ("retired", "", 0, "", 0),
            "old-canary": ("retired", "", 0, "", 0),
            "halted-canary": ("halted", "canary", 1200, "", 0),
            "halted-active": ("halted", "active", 0, "", 0),
            "halted-untouched": ("halted", "new", 0, "", 0),
            "shadow-of-new": ("shadow", "", 0, "new", 0),
            "shadow-of-canary": ("shadow", "", 0, "canary", 300),
        }
    finally:
        _migrate_to_latest()
    # What a later test in this process meets: nothing left to apply.
    executor = MigrationExecutor(connection)
    assert executor.migration_plan(executor.loader.graph.leaf_nodes()) == []
