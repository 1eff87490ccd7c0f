"""English texts the ledger stores (classification and escalation reasons, audit details, run
endings) and the console shows in the user's language.

A stored text is a template, marked with ``gettext_noop`` where it is defined so that
``makemessages`` finds it, filled in with its parameters when it is stored: the database, the
API and the exports keep the English. The console matches a stored text back to its template
(``translate``), translates the template and fills in the same parameters; a parameter named
in ``texts`` is itself a stored text (a reason inside a reason) and is translated in turn.
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
            _PARAMETRISED.sort(key=lambda t: -len(_PLACEHOLDER.sub("", t.template)))
        else:
            _EXACT[template.replace("%%", "%")] = self

    def __call__(self, **params: object) -> str:
        """The English to store, ``params`` filled in."""
        return self.template % params if params else self.template

    def __str__(self) -> str:
        return self.template

    def translated(self, params: dict[str, str]) -> str:
        filled = {
            name: translate(value) if name in self.texts else value
            for name, value in params.items()
        }
        return gettext(self.template) % filled if filled else gettext(self.template)


def translate(text: str) -> str:
    """``text`` in the active language when it is a stored text's English; else as it is."""
    return _translate(text, get_language())


@lru_cache(maxsize=4096)
def _translate(text: str, language: str | None) -> str:
    """One translation per text and language: a list shows a few texts on every row."""
    exact = _EXACT.get(text)
    if exact is not None:
        return exact.translated({})
    for stored in _PARAMETRISED:
        match = stored.pattern.fullmatch(text)
        if match:
            return stored.translated(match.groupdict())
    return text
