"""One simple command, given as an argument vector, classified by its program.

A program with a classifier of its own (``CLASSIFIERS``, filled by the package from the program
families: wrappers, readers, git, toolchains, infrastructure, and the shells of the walker) is
classified by it; any other is looked up in the tables, and one in none of them is not
understood. ``result`` and ``unknown`` build what every classifier returns; ``unknown`` also
flags a part that mentions a destructive program as destructive.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from contextvars import ContextVar

from django.utils.translation import gettext_noop

from ledger.classification import Classification
from ledger.classification.shell.argv import ArgvClassifier, has_long, short_flags
from ledger.classification.shell.tables import (
    ACTING_OPTIONS,
    DESTRUCTIVE,
    DESTRUCTIVE_WORDS,
    NO_ACTING_OPTIONS,
    READ_ONLY,
    TRUSTED_BIN_DIRS,
    WRITES,
)
from ledger.domain import Idempotency
from ledger.stored_text import StoredText

MAX_NESTING = 4  # sh -c "sh -c '...'" deeper than this is not understood

IDEMPOTENT = Idempotency.IDEMPOTENT
CONDITIONAL = Idempotency.CONDITIONAL
NON_IDEMPOTENT = Idempotency.NON_IDEMPOTENT


# The programs with a classifier of their own, by name: the package fills it from the program
# families. A program not in it is looked up in the tables.
CLASSIFIERS: dict[str, ArgvClassifier] = {}

_PART = StoredText(gettext_noop("`%(part)s`: %(why)s"), texts=("why",))
_FLAGGED = StoredText(
    gettext_noop("%(why)s It mentions a destructive program, so it is flagged destructive."),
    texts=("why",),
)
_UNVOUCHED_PATH = StoredText(
    gettext_noop("runs a program by a path the classifier cannot vouch for.")
)
_UNKNOWN_PROGRAM = StoredText(gettext_noop("'%(program)s' is not a known command."))
_OPTION_RUNS = StoredText(gettext_noop("this `%(program)s` option runs another program."))
# The reasons the program families give too.
READ_ONLY_COMMAND = StoredText(gettext_noop("a read-only command."))
WRITES_OUTPUT = StoredText(gettext_noop("writes its output to a file."))
ONLY_READS = StoredText(gettext_noop("`%(program)s %(sub)s` only reads."))


def result(
    idempotency: Idempotency, part: str, why: str, rule: str, *, destructive: bool = False
) -> Classification:
    return Classification.of(
        idempotency,
        reason=_PART(part=part, why=why) if part else why,
        rule=f"command.{rule}",
        destructive=destructive,
    )


def unknown(part: str, why: str, rule: str = "not_understood") -> Classification:
    destructive = _looks_destructive(part)
    if destructive:
        why = _FLAGGED(why=why)
    return result(NON_IDEMPOTENT, part, why, rule, destructive=destructive)


_ROUGH_SEPARATORS = re.compile(r"[;&|\n()`{}]+|\$\(|<\(|>\(")
_in_fallback: ContextVar[bool] = ContextVar("_in_fallback", default=False)


def _looks_destructive(text: str) -> bool:
    """A lexical fallback for text that was not understood: could any part of it destroy?

    The text is cut at anything that looks like a shell operator and each piece is classified
    as a plain argument vector, so the program tables decide here too; any word that names a
    destructive action also counts. This only sets the flag: the result stays ``never``.
    """
    words = set(re.split(r"[^A-Za-z0-9_.:-]+", text))
    if words & (DESTRUCTIVE.keys() | DESTRUCTIVE_WORDS):
        return True
    if _in_fallback.get():
        return False
    reset = _in_fallback.set(True)
    try:
        for piece in _ROUGH_SEPARATORS.split(text):
            try:
                argv = shlex.split(piece)
            except ValueError:
                argv = piece.split()
            if argv and classify_argv(argv, depth=MAX_NESTING).destructive:
                return True
        return False
    finally:
        _in_fallback.reset(reset)


def classify_argv(argv: Sequence[str], *, depth: int = 0, text: str = "") -> Classification:
    """Classify one simple command given as an argument vector."""
    text = text or shorten(" ".join(argv))
    program = _program_name(argv[0])
    if program is None:
        return unknown(text, _UNVOUCHED_PATH())
    args = list(argv[1:])
    special = CLASSIFIERS.get(program)
    if special is not None:
        return special(program, args, text, depth)
    if program in READ_ONLY:
        return _read_only_unless_an_option_acts(program, args, text)
    if program in DESTRUCTIVE:
        return result(
            NON_IDEMPOTENT, text, DESTRUCTIVE[program](), f"destructive.{program}", destructive=True
        )
    if program in WRITES:
        return result(NON_IDEMPOTENT, text, WRITES[program](), f"writes.{program}")
    return unknown(text, _UNKNOWN_PROGRAM(program=program), "unknown_program")


def _program_name(word: str) -> str | None:
    if "/" not in word:
        return word
    if word.startswith(TRUSTED_BIN_DIRS) and word.count("/") >= 2:
        return word.rsplit("/", 1)[1]
    return None


def shorten(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ``+N`` (a line) and ``+/pattern`` (a search) only position a pager's view.
_PAGER_POSITION = re.compile(r"^\+(\d+|/[^!|]*)$")


def _read_only_unless_an_option_acts(program: str, args: list[str], text: str) -> Classification:
    acting = ACTING_OPTIONS.get(program, NO_ACTING_OPTIONS)
    words = args[: args.index("--")] if "--" in args else args
    prefixed = [w for w in words if w.startswith(acting.runs_prefix)] if acting.runs_prefix else []
    if program in {"less", "more"}:
        prefixed = [w for w in prefixed if not _PAGER_POSITION.match(w)]
    if prefixed or set(acting.runs_short) & short_flags(args) or has_long(args, *acting.runs_long):
        return unknown(text, _OPTION_RUNS(program=program), f"{program}.runs")
    if set(acting.writes_short) & short_flags(args) or has_long(args, *acting.writes_long):
        return result(CONDITIONAL, text, WRITES_OUTPUT(), f"{program}.output")
    return result(IDEMPOTENT, text, READ_ONLY_COMMAND(), f"read_only.{program}")
