"""Each console user chooses their language; it follows them to any browser.

The choice is stored in ``Preferences`` and cached in the session, so a request costs no query;
signing in loads it. Before sign-in, and for users who never chose, Django's usual negotiation
(cookie, then ``Accept-Language``) applies.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.contrib.auth.signals import user_logged_in
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.utils import translation

from console.models import Preferences

SESSION_KEY = "console_language"


def _saved_language(user_id: object) -> str:
    if not isinstance(user_id, int):
        return ""
    saved = Preferences.objects.filter(user_id=user_id).values_list("language", flat=True)
    return saved.first() or ""


@receiver(user_logged_in)
def load_language(
    sender: object, request: HttpRequest | None, user: object, **kwargs: object
) -> None:
    if request is not None and hasattr(request, "session"):
        request.session[SESSION_KEY] = _saved_language(getattr(user, "pk", None))


def save_language(request: HttpRequest, language: str) -> None:
    """Remember ``language`` for this user (every browser) and use it from this response on."""
    user_id = request.user.pk
    assert isinstance(user_id, int)  # only signed-in users choose
    Preferences.objects.update_or_create(user_id=user_id, defaults={"language": language})
    request.session[SESSION_KEY] = language
    translation.activate(language)
    request.LANGUAGE_CODE = language


class UserLanguageMiddleware:
    """After ``LocaleMiddleware`` and authentication: a signed-in user's saved language wins."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.known = {code for code, _name in settings.LANGUAGES}

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.user.is_authenticated:
            language = request.session.get(SESSION_KEY)
            if language is None:  # signed in before this was stored
                language = request.session[SESSION_KEY] = _saved_language(request.user.pk)
            if language in self.known:
                translation.activate(language)
                request.LANGUAGE_CODE = language
        return self.get_response(request)
