"""A tenant whose candidate combination is in shadow, for the tests of mirroring live runs."""

from __future__ import annotations

from ledger import combinations
from ledger.models import Tenant, VersionCombination


def candidate_in_shadow(share_bp: int = 10_000, slug: str = "acme") -> VersionCombination:
    """The tenant's baseline active and its candidate in shadow with ``share_bp`` of live runs
    to mirror."""
    tenant = Tenant.objects.get(slug=slug)
    made = {
        label: combinations.create_combination(
            tenant=tenant,
            label=label,
            actor="test",
            source="system",
            model=f"model-{label}",
            prompt="p",
            rules="r",
            tool_schema="t",
            data_version="d",
        )[0]
        for label in ("baseline", "candidate")
    }
    combinations.activate(
        tenant=tenant, combination_id=made["baseline"].pk, actor="test", source="system"
    )
    return combinations.set_shadow(
        tenant=tenant,
        combination_id=made["candidate"].pk,
        actor="test",
        source="system",
        share_bp=share_bp,
    )
