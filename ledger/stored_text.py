"""English texts the ledger stores (classification and escalation reasons, audit details, run
endings) and the console shows in the user's language.

A stored text is a template, marked with ``gettext_noop`` where it is defined so that
``makemessages`` finds it, filled in with its parameters when it is stored: the database, the
API and the exports keep the English. The console matches a stored text back to its template
(``translate``), translates the template and fills in the same parameters; a parameter named
in ``texts`` is itself a stored text (a reason inside a reason) and is translated in turn.
Where more than one template matches, the reading whose templates cover the most of the text
wins: ``SQL: Delete is not a read-only statement.`` is the frame ``SQL: %(reason)s`` around a
reason, not ``%(kind)s is not a read-only statement.`` with ``SQL: Delete`` as its ``kind``.
A module's templates are known once it is imported: every module that stores one is imported
by the URLconf or an app's ``ready()``.
"""

from __future__ import annotations

import re
from functools import lru_cache

from django.utils.translation import get_language, gettext

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
_EXACT: dict[str, StoredText] = {}
_PARAMETRISED: list[StoredText] = []


class StoredText:
    """One template (a msgid, with ``%(name)s`` placeholders) of a text the ledger stores."""

    def __init__(self, template: str, *, texts: tuple[str, ...] = ()) -> None:
        self.template = template
        self.texts = texts
        names = _PLACEHOLDER.findall(template)
        assert set(texts) <= set(names), (template, texts)
        self.literal = len(_PLACEHOLDER.sub("", template))
        parts = _PLACEHOLDER.split(template)
        # Literal parts escaped, each placeholder any text (the shortest that fits the whole).
        self.pattern = re.compile(
            "".join(
                f"(?P<{part}>.+?)" if index % 2 else re.escape(part.replace("%%", "%"))
                for index, part in enumerate(parts)
            ),
            re.DOTALL,
        )
        if names:
            _PARAMETRISED.append(self)
            # The template with the most words of its own is tried first: the most specific.
            _PARAMETRISED.sort(key=lambda t: -t.literal)
        else:
            _EXACT[template.replace("%%", "%")] = self

    def __call__(self, **params: object) -> str:
        """The English to store, ``params`` filled in."""
        return self.template % params if params else self.template

    def __str__(self) -> str:
        return self.template

    def translated(self, params: dict[str, str]) -> str:
        """The template in the active language, ``params`` (already translated) filled in."""
        return gettext(self.template) % params if params else gettext(self.template)


def translate(text: str) -> str:
    """``text`` in the active language when it is a stored text's English; else as it is."""
    return _reading(text, get_language())[1]


def begins_with_name(text: str) -> bool:
    """Whether ``text`` is a stored text that begins with a parameter (a name, such as a
    combination's label, which is shown as it was written), by its best reading."""
    return _reading(text, get_language())[2]


@lru_cache(maxsize=4096)
def _reading(text: str, language: str | None) -> tuple[int, str, bool]:
    """The reading of ``text`` whose templates cover the most of it: (how many characters
    they cover, ``text`` in the active language, whether its template begins with a
    parameter). One per text and language: a list shows a few texts on every row."""
    exact = _EXACT.get(text)
    if exact is not None:
        return len(text), exact.translated({}), False
    best = (0, text, False)
    for stored in _PARAMETRISED:
        match = stored.pattern.fullmatch(text)
        if match is None:
            continue
        covered, params = stored.literal, match.groupdict()
        for name in stored.texts:
            inner, params[name], _named = _reading(params[name], language)
            covered += inner
        if covered > best[0]:
            best = (covered, stored.translated(params), stored.template.startswith("%("))
    return best
