"""Approvers see when someone else has an approval open (issue: "two approvers opening the same
item see that it is taken").

Opening the page (a GET) records the claim, so it works without JavaScript. That makes it
forgeable by a cross-site GET, which is acceptable only because a claim is presence, never
permission: deciding is a POST with CSRF, checked by ``approvals.decide``."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from console.models import ApprovalClaim
from ledger.models import ApprovalRequest

#: How long opening an approval counts as "taken" without opening it again.
CLAIM_TTL = timedelta(minutes=10)


def is_live(claim: ApprovalClaim | None) -> bool:
    return claim is not None and claim.claimed_at > timezone.now() - CLAIM_TTL


def holder(approval: ApprovalRequest) -> str | None:
    """The user name of whoever has ``approval`` open now (use with ``select_related("claim")``)."""
    current = getattr(approval, "claim", None)  # None when there is no claim row
    if current is None or not is_live(current):
        return None
    return str(current.user.get_username())


def claim(approval: ApprovalRequest, user: AbstractBaseUser) -> ApprovalClaim | None:
    """Mark ``approval`` as being reviewed by ``user``. Returns someone else's live claim when it
    is already taken (theirs is kept), otherwise ``None``."""
    now = timezone.now()
    with transaction.atomic():
        current, created = ApprovalClaim.objects.select_for_update().get_or_create(
            approval=approval, defaults={"user_id": user.pk, "claimed_at": now}
        )
        if created:
            return None
        if current.user_id != user.pk and is_live(current):
            return current
        current.user_id = user.pk
        current.claimed_at = now
        current.save(update_fields=["user", "claimed_at"])
    return None


def taken(approval: ApprovalRequest, user: AbstractBaseUser) -> ApprovalClaim | None:
    """Someone else's live claim on ``approval``, read without claiming it: the approval's page
    polling itself is not opening it again."""
    current = ApprovalClaim.objects.select_related("user").filter(approval=approval).first()
    if current is not None and current.user_id != user.pk and is_live(current):
        return current
    return None


def release(approval: ApprovalRequest) -> None:
    ApprovalClaim.objects.filter(approval=approval).delete()
