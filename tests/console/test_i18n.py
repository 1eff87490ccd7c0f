"""English and Simplified Chinese, chosen per user; the catalogue is complete and compiled."""

from __future__ import annotations

import re
from pathlib import Path

import polib
import pytest
from django.test import Client

from console.models import Preferences
from tests.console.conftest import make_user, signed_in

ROOT = Path(__file__).resolve().parents[2]
CATALOGUE = ROOT / "locale" / "zh_Hans" / "LC_MESSAGES"
# {% translate "..." %} (with or without a context) in templates and _("...") in the console's
# Python.
SIMPLE_STRINGS = re.compile(
    r"""{% translate (["'])(.+?)\1(?: context ["'][^"']+["'])? %}|\b_\((["'])(.+?)\3\)"""
)


def test_every_string_is_translated_and_the_compiled_catalogue_is_current() -> None:
    po = polib.pofile(str(CATALOGUE / "django.po"))
    assert po.untranslated_entries() == [] and po.fuzzy_entries() == []
    mo = {(e.msgid, e.msgstr) for e in polib.mofile(str(CATALOGUE / "django.mo"))}
    assert {(e.msgid, e.msgstr) for e in po.translated_entries() if not e.msgid_plural} <= mo


def test_every_simple_string_of_the_console_is_in_the_catalogue() -> None:
    known = {e.msgid.replace("%%", "%") for e in polib.pofile(str(CATALOGUE / "django.po"))}
    sources = [*(ROOT / "templates" / "console").glob("*.html"), *(ROOT / "console").glob("*.py")]
    found = {
        m.group(2) or m.group(4)
        for path in sources
        for m in SIMPLE_STRINGS.finditer(path.read_text())
    }
    assert len(found) > 100  # the scan itself works
    assert sorted(found - known) == []  # run `make messages` and translate


@pytest.mark.django_db
def test_each_user_gets_their_own_language_in_any_browser(django_user_model, tenant) -> None:
    zh = make_user(django_user_model, "li", tenant, "operator")
    en = make_user(django_user_model, "ann", tenant, "operator")
    li = signed_in(zh)
    assert "Inbox" in li.get("/", secure=True).content.decode()

    response = li.post("/language", {"language": "zh-hans", "next": "/unknown/"}, secure=True)
    assert response.status_code == 302 and response["Location"] == "/unknown/"
    assert Preferences.objects.get(user=zh).language == "zh-hans"
    page = li.get("/", secure=True)
    assert page["Content-Language"] == "zh-hans"
    assert "收件箱" in page.content.decode() and "Inbox</a>" not in page.content.decode()
    # The page says its language, for screen readers, fonts and the browser's translator.
    assert '<html lang="zh-hans">' in page.content.decode()
    assert '<html lang="en">' in signed_in(en).get("/", secure=True).content.decode()

    # Signing in from another browser brings the choice along; other users keep theirs.
    fresh = Client()
    signing_in = fresh.post("/login/", {"username": "li", "password": "pw-123456789"}, secure=True)
    assert signing_in.status_code == 302
    assert "现在需要人工处理的事项" in fresh.get("/", secure=True).content.decode()
    assert "What needs a human now" in signed_in(en).get("/", secure=True).content.decode()


@pytest.mark.django_db
def test_a_bad_language_or_foreign_redirect_changes_nothing(django_user_model, tenant) -> None:
    user = make_user(django_user_model, "li", tenant, "operator")
    client = signed_in(user)
    client.post("/language", {"language": "klingon"}, secure=True)
    assert not Preferences.objects.filter(user=user).exists()
    response = client.post(
        "/language", {"language": "en", "next": "https://evil.example/"}, secure=True
    )
    assert response["Location"] == "/"
    assert client.get("/language", secure=True).status_code == 405


@pytest.mark.django_db
def test_states_and_decisions_are_words_in_the_users_language(django_user_model, tenant, pending):
    user = make_user(django_user_model, "li", tenant, "approver")
    Preferences.objects.create(user=user, language="zh-hans")
    html = signed_in(user).get(f"/approvals/{pending.pk}/", secure=True).content.decode()
    # The approval's state, "pending".
    assert '<span class="badge warn" title="">待审批</span>' in html
    assert ">pending<" not in html
    assert "有条件" in html  # conditional


@pytest.mark.django_db
def test_the_look_ups_section_and_their_count_are_different_words(
    django_user_model, tenant, unknown
):
    user = make_user(django_user_model, "li", tenant, "operator")
    Preferences.objects.create(user=user, language="zh-hans")
    html = signed_in(user).get(f"/unknown/{unknown.pk}/", secure=True).content.decode()
    assert "<dt>查询次数</dt>" in html  # "number of look-ups", beside the number
    assert "<h3>查询记录</h3>" in html  # the look-ups themselves, a list


@pytest.mark.django_db
def test_the_queues_next_step_is_in_the_users_language(django_user_model, tenant, tmp_path):
    from django.utils import translation

    from ledger.domain import WRITE_CONFLICT_ESCALATION
    from tests.write_conflicts import ELSEWHERE, replay_conflict, workspace_file

    replay_conflict(tenant, workspace_file(tenant, tmp_path), ELSEWHERE)
    user = make_user(django_user_model, "olga", tenant, "operator")
    Preferences.objects.create(user=user, language="zh-hans")
    with translation.override("zh-hans"):
        chinese = translation.gettext(str(WRITE_CONFLICT_ESCALATION))
    assert chinese != str(WRITE_CONFLICT_ESCALATION)

    page = signed_in(user).get("/unknown/", secure=True).content.decode()

    step = page.split('class="next-step"')[1].split("</span>")[0]
    assert chinese in step and str(WRITE_CONFLICT_ESCALATION) not in step
