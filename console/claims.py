"""Approvers see when someone else has an approval open (issue: "two approvers opening the same
item see that it is taken").

Opening the page (a GET) records the claim, so it works without JavaScript. That makes it
forgeable by a cross-site GET, which is acceptable only because a claim is presence, never
permission: deciding is a POST with CSRF, checked by ``approvals.decide``."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.db.models.functions import Now

from console.models import ApprovalClaim
from ledger.models import ApprovalRequest

#: How long opening an approval counts as "taken" without opening it again. Claims are stamped
#: and judged by the database's clock: web processes on several machines disagree.
CLAIM_TTL = timedelta(minutes=10)


def live(prefix: str = "") -> ExpressionWrapper:
    """Whether the claim reached through ``prefix`` (``"claim__"`` from an approval) is live,
    as a column of the query that reads it."""
    fresh = Q(**{f"{prefix}claimed_at__gt": Now() - CLAIM_TTL})
    return ExpressionWrapper(fresh, output_field=BooleanField())


def holder(approval: ApprovalRequest) -> str | None:
    """The user name of whoever has ``approval`` open now: an approval of the queue's query
    (``console.selectors``), read with its claim, its claimant and ``claim_live``."""
    current = getattr(approval, "claim", None)  # None when there is no claim row
    if current is None or not approval.claim_live:  # type: ignore[attr-defined]
        return None
    return str(current.user.get_username())


def claim(approval: ApprovalRequest, user: AbstractBaseUser) -> ApprovalClaim | None:
    """Mark ``approval`` as being reviewed by ``user``. Returns someone else's live claim when it
    is already taken (theirs is kept), otherwise ``None``."""
    with transaction.atomic():
        claims = ApprovalClaim.objects.select_for_update().annotate(is_live=live())
        current, created = claims.get_or_create(
            approval=approval, defaults={"user_id": user.pk, "claimed_at": Now()}
        )
        if created:
            return None
        if current.user_id != user.pk and current.is_live:
            return current
        current.user_id = user.pk
        current.claimed_at = Now()
        current.save(update_fields=["user", "claimed_at"])
    return None


def taken(approval: ApprovalRequest, user: AbstractBaseUser) -> ApprovalClaim | None:
    """Someone else's live claim on ``approval``, read without claiming it: the approval's page
    polling itself is not opening it again."""
    return (
        ApprovalClaim.objects.select_related("user")
        .alias(is_live=live())
        .filter(approval=approval, is_live=True)
        .exclude(user_id=user.pk)
        .first()
    )


def release(approval: ApprovalRequest) -> None:
    ApprovalClaim.objects.filter(approval=approval).delete()
