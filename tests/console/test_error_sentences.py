"""An error a person reads is a sentence: a service's clause gets its capital and its full stop;
so is a stored text, in the reader's language, but a name it begins with is kept as written."""

from __future__ import annotations

from django.utils import translation

from console.templatetags.terms import said


@translation.override("en")
def test_a_services_clause_reads_as_a_sentence() -> None:
    assert said("invalid rollout plan (min_minutes: 0 to 10080)") == (
        "Invalid rollout plan (min_minutes: 0 to 10080)."
    )
    assert said("a rejection needs a reason for the model") == (
        "A rejection needs a reason for the model."
    )
    assert said("Choose an action.") == "Choose an action."
    assert said("") == ""


@translation.override("en")
def test_a_stored_text_keeps_the_name_it_begins_with_in_any_language() -> None:
    halted = "good is halted: resume it (it returns to canary) or retire it"
    assert said(halted) == halted + "."
    resumed = "only a halted combination can be resumed (good is canary)"
    assert said(resumed) == "Only a halted combination can be resumed (good is canary)."
    with translation.override("zh-hans"):
        chinese = said(halted)
    assert chinese.startswith("good ") and chinese != halted
