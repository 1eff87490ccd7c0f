"""Each console user chooses their language and their time zone; both follow them to any
browser.

The choices are stored in ``Preferences`` and cached in the session, so a request costs no
query; signing in loads them. Before sign-in, and for users who never chose, Django's usual
language negotiation (cookie, then ``Accept-Language``) applies, and times are shown in UTC.
Every time the console shows carries its zone (``Y-m-d H:i:s T``).
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Callable
from functools import cache

from django.conf import settings
from django.contrib.auth.signals import user_logged_in
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.utils import timezone, translation

from console.models import Preferences

SESSION_KEY = "console_language"
ZONE_SESSION_KEY = "console_time_zone"


@cache
def time_zones() -> list[str]:
    """The IANA time zones a user may choose (the machine's tz database), UTC first."""
    return ["UTC", *sorted(zoneinfo.available_timezones() - {"UTC", "localtime"})]


def _saved(user_id: object) -> tuple[str, str]:
    """The user's saved language and time zone ("" where they chose none)."""
    if not isinstance(user_id, int):
        return "", ""
    saved = Preferences.objects.filter(user_id=user_id).values_list("language", "time_zone")
    return saved.first() or ("", "")


@receiver(user_logged_in)
def load_preferences(
    sender: object, request: HttpRequest | None, user: object, **kwargs: object
) -> None:
    if request is not None and hasattr(request, "session"):
        language, zone = _saved(getattr(user, "pk", None))
        request.session[SESSION_KEY], request.session[ZONE_SESSION_KEY] = language, zone


def save_language(request: HttpRequest, language: str) -> None:
    """Remember ``language`` for this user (every browser) and use it from this response on."""
    user_id = request.user.pk
    assert isinstance(user_id, int)  # only signed-in users choose
    Preferences.objects.update_or_create(user_id=user_id, defaults={"language": language})
    request.session[SESSION_KEY] = language
    translation.activate(language)
    request.LANGUAGE_CODE = language


def save_time_zone(request: HttpRequest, zone: str) -> None:
    """Remember the time zone ``zone`` (one of ``time_zones()``) for this user and show times in
    it from this response on."""
    user_id = request.user.pk
    assert isinstance(user_id, int)  # only signed-in users choose
    if zone not in time_zones():
        raise ValueError(f"unknown time zone {zone!r}")
    preferences, created = Preferences.objects.get_or_create(
        user_id=user_id,
        defaults={"time_zone": zone, "language": translation.get_language() or ""},
    )
    if not created:
        preferences.time_zone = zone
        preferences.save(update_fields=["time_zone"])
    request.session[ZONE_SESSION_KEY] = zone
    timezone.activate(zoneinfo.ZoneInfo(zone))


class UserPreferencesMiddleware:
    """After ``LocaleMiddleware`` and authentication: a signed-in user's saved language and time
    zone win."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.known = {code for code, _name in settings.LANGUAGES}

    def __call__(self, request: HttpRequest) -> HttpResponse:
        timezone.deactivate()  # UTC unless the user chose a zone
        if request.user.is_authenticated:
            session = request.session
            if SESSION_KEY not in session or ZONE_SESSION_KEY not in session:
                # Signed in before these were stored.
                session[SESSION_KEY], session[ZONE_SESSION_KEY] = _saved(request.user.pk)
            language, zone = session[SESSION_KEY], session[ZONE_SESSION_KEY]
            if language in self.known:
                translation.activate(language)
                request.LANGUAGE_CODE = language
            if zone in time_zones():
                timezone.activate(zoneinfo.ZoneInfo(zone))
        return self.get_response(request)
