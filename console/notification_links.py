"""Where a person acts on what an on-call notification is about: the console's page of its
subject. The ledger composes notifications without knowing the console's URLs; the setting
``LEDGER_NOTIFICATION_LINKS`` names this function, which it calls for the link."""

from __future__ import annotations

from django.urls import reverse

from ledger.models import Notification

Subject = Notification.Subject


def console_path(subject_type: str, subject_id: int) -> str:
    """The console path of a notification's subject (an unknown call, an approval, an alert,
    a halted combination)."""
    if subject_type == Subject.RECORD:
        return reverse("console:unknown_call", args=[subject_id])
    if subject_type == Subject.APPROVAL:
        return reverse("console:approval", args=[subject_id])
    if subject_type == Subject.ALERT:
        return reverse("console:metrics")
    return reverse("console:combinations")
