"""A shell command line classified by its most dangerous part.

The line is parsed into a syntax tree with bashlex, and every simple command and redirection
found anywhere in it is classified on its own (``classify_argv``); the most conservative result
wins. The shells and ``eval`` are classified here too: the command line they run is walked like
the outer one, one level deeper.
"""

from __future__ import annotations

from typing import Any

import bashlex
import bashlex.errors
from django.utils.translation import gettext_noop

from ledger.classification import Classification, most_conservative
from ledger.classification.shell.argv import ArgvClassifier, dangerous_variable, short_flags
from ledger.classification.shell.programs import (
    CONDITIONAL,
    IDEMPOTENT,
    MAX_NESTING,
    NON_IDEMPOTENT,
    classify_argv,
    result,
    shorten,
    unknown,
)
from ledger.classification.shell.tables import HARMLESS_TARGETS
from ledger.stored_text import StoredText

MAX_COMMAND_LENGTH = 20_000

_EMPTY = StoredText(gettext_noop("an empty command is not understood."))
_TOO_LONG = StoredText(gettext_noop("the command is too long to classify."))
_NUL = StoredText(gettext_noop("the command contains a NUL byte."))
_TOO_DEEP = StoredText(gettext_noop("shells are nested too deeply to classify."))
_UNPARSED = StoredText(gettext_noop("the shell syntax could not be parsed (%(error)s)."))
_NO_COMMAND = StoredText(gettext_noop("no command was found."))
_CONSTRUCT = StoredText(gettext_noop("shell construct '%(kind)s' is not understood."))
_PART_KIND = StoredText(gettext_noop("'%(kind)s' is not understood."))
_EXPANSION_RUNS = StoredText(gettext_noop("a parameter expansion runs code."))
_DANGEROUS_VARIABLE = StoredText(
    gettext_noop("setting %(name)s can make the command run other programs.")
)
_COMPUTED_PROGRAM = StoredText(gettext_noop("the program name is computed at run time."))
_ASSIGNS = StoredText(gettext_noop("only sets shell variables."))
_APPENDS = StoredText(gettext_noop("appends to a file; a repeat appends again."))
_OVERWRITES = StoredText(gettext_noop("overwrites a file; replay needs a hash check."))
_HIDDEN_SCRIPT = StoredText(gettext_noop("`%(program)s` runs a script the classifier cannot see."))


def classify_command(command: str) -> Classification:
    """Classify one shell command line by its most dangerous part."""
    return _classify_source(command, depth=0)


def _classify_source(command: str, *, depth: int) -> Classification:
    shown = shorten(command)
    if not command.strip():
        return unknown(shown, _EMPTY(), "empty")
    if len(command) > MAX_COMMAND_LENGTH:
        return unknown(shown, _TOO_LONG(), "too_long")
    if "\x00" in command:
        return unknown(shown, _NUL(), "control_character")
    if depth > MAX_NESTING:
        return unknown(shown, _TOO_DEEP(), "too_deep")
    try:
        trees = bashlex.parse(command)
    except bashlex.errors.ParsingError as exc:
        return unknown(shown, _UNPARSED(error=exc.message), "unparsed")
    except Exception as exc:  # bashlex raises assorted errors on syntax it does not support
        return unknown(shown, _UNPARSED(error=exc), "unparsed")
    walker = _Walker(command, depth)
    for tree in trees:
        walker.visit(tree)
    return walker.result()


class _Walker:
    """Collects a classification for every simple command and redirection in a tree."""

    def __init__(self, source: str, depth: int) -> None:
        self.source = source
        self.depth = depth
        self.parts: list[Classification] = []

    def result(self) -> Classification:
        if not self.parts:
            return unknown(shorten(self.source), _NO_COMMAND(), "empty")
        combined = self.parts[0]
        for part in self.parts[1:]:
            combined = most_conservative(combined, part)
        return combined

    def visit(self, node: Any) -> None:
        kind = node.kind
        if kind == "command":
            self._command(node)
        elif kind in {"list", "pipeline", "compound", "if", "for", "while", "until"}:
            for child in getattr(node, "parts", None) or getattr(node, "list", None) or []:
                self.visit(child)
        elif kind == "word":
            self._word(node)
        elif kind in {"operator", "pipe", "reservedword"}:
            return
        else:
            self.parts.append(unknown(self._text(node), _CONSTRUCT(kind=kind)))

    def _text(self, node: Any) -> str:
        start, end = node.pos
        return shorten(self.source[start:end])

    def _word(self, node: Any) -> bool:
        """Classify substitutions inside a word; True when the word's value is not static."""
        dynamic = False
        for part in getattr(node, "parts", []):
            if part.kind in {"commandsubstitution", "processsubstitution"}:
                dynamic = True
                self.visit(part.command)
            elif part.kind == "parameter":
                dynamic = True
                if any(ch in part.value for ch in "$`()"):
                    self.parts.append(unknown(self._text(part), _EXPANSION_RUNS()))
            elif part.kind == "tilde":
                continue
            else:
                self.parts.append(unknown(self._text(part), _PART_KIND(kind=part.kind)))
        return dynamic

    def _command(self, node: Any) -> None:
        argv: list[str] = []
        dynamic_program = False
        for part in node.parts:
            if part.kind == "assignment":
                self._word(part)
                name = part.word.split("=", 1)[0]
                if dangerous_variable(name):
                    self.parts.append(
                        unknown(
                            self._text(part),
                            _DANGEROUS_VARIABLE(name=name),
                            "env.dangerous_variable",
                        )
                    )
            elif part.kind == "word":
                dynamic = self._word(part)
                if not argv and dynamic:
                    dynamic_program = True
                argv.append(part.word)
            elif part.kind == "redirect":
                self._redirect(part)
            else:
                self.parts.append(unknown(self._text(part), _PART_KIND(kind=part.kind)))
        text = self._text(node)
        if dynamic_program:
            self.parts.append(unknown(text, _COMPUTED_PROGRAM()))
        elif not argv:
            self.parts.append(result(IDEMPOTENT, text, _ASSIGNS(), "assign"))
        else:
            self.parts.append(classify_argv(argv, depth=self.depth, text=text))

    def _redirect(self, node: Any) -> None:
        target = node.output
        if hasattr(target, "kind"):
            self._word(target)
        kind = node.type
        text = self._text(node)
        if kind in {"<", "<<", "<<<", "<&", "<<-"}:
            return
        if kind == ">&" and not hasattr(target, "kind"):
            return  # 2>&1 duplicates a descriptor; nothing is written
        path = target.word if hasattr(target, "kind") else str(target)
        if path in HARMLESS_TARGETS:
            return
        if kind in {">>", "&>>"}:
            self.parts.append(result(NON_IDEMPOTENT, text, _APPENDS(), "append"))
        else:
            self.parts.append(result(CONDITIONAL, text, _OVERWRITES(), "redirect"))


def _shell(program: str, args: list[str], text: str, depth: int) -> Classification:
    flags = short_flags(args)
    if "c" in flags:
        script_index = next(
            (
                i + 1
                for i, a in enumerate(args)
                if a.startswith("-") and "c" in a[1:] and not a.startswith("--")
            ),
            None,
        )
        if script_index is not None and script_index < len(args):
            inner = _classify_source(args[script_index], depth=depth + 1)
            return inner
    return unknown(text, _HIDDEN_SCRIPT(program=program))


def _eval(program: str, args: list[str], text: str, depth: int) -> Classification:
    return _classify_source(" ".join(args), depth=depth + 1)


# A shell's `-c` script and `eval`'s words are command lines of their own.
PROGRAMS: dict[str, ArgvClassifier] = {
    "sh": _shell,
    "bash": _shell,
    "zsh": _shell,
    "dash": _shell,
    "ksh": _shell,
    "eval": _eval,
}
