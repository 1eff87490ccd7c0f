"""Programs that read files or text, unless an option or argument makes them act: ``find``
(``-delete``, ``-exec``), ``sed`` and ``awk`` (by their script), ``sort``, ``uniq``, ``rg``,
``tee``, ``date``, ``yq`` and ``hostname``.
"""

from __future__ import annotations

import re

from django.utils.translation import gettext_noop

from ledger.classification import Classification, most_conservative
from ledger.classification.shell.argv import ArgvClassifier, has_long, operands, short_flags
from ledger.classification.shell.programs import (
    CONDITIONAL,
    IDEMPOTENT,
    NON_IDEMPOTENT,
    READ_ONLY_COMMAND,
    WRITES_OUTPUT,
    classify_argv,
    result,
    unknown,
)
from ledger.classification.shell.tables import HARMLESS_TARGETS
from ledger.stored_text import StoredText

_FIND_DELETES = StoredText(gettext_noop("deletes what it finds."))
_FIND_EXEC_ALONE = StoredText(gettext_noop("`find -exec` without a command."))
_FIND_WRITES = StoredText(gettext_noop("writes its results to a file."))
_FIND_LISTS = StoredText(gettext_noop("`find` without actions only lists."))
_IN_PLACE = StoredText(gettext_noop("edits files in place."))
_SED_FILE = StoredText(gettext_noop("runs a sed script from a file the classifier cannot see."))
_SED_NO_SCRIPT = StoredText(gettext_noop("`sed` without a script is not understood."))
_SED_PRINTS = StoredText(gettext_noop("prints edited text without writing files."))
_SED_ACTS = StoredText(gettext_noop("the sed script may write files or run commands (w, W, e)."))
_AWK_FILE = StoredText(gettext_noop("runs an awk program from a file or in place."))
_AWK_PRINTS = StoredText(gettext_noop("an awk program that only prints."))
_AWK_ACTS = StoredText(gettext_noop("the awk program may write files or run commands."))
_SORT_PROGRAM = StoredText(gettext_noop("`sort --compress-program` runs another program."))
_RG_PRE = StoredText(gettext_noop("`rg --pre` runs a preprocessor program."))
_TEE_COPIES = StoredText(gettext_noop("copies its input to standard output."))
_TEE_APPENDS = StoredText(gettext_noop("appends to files."))
_TEE_OVERWRITES = StoredText(gettext_noop("overwrites files."))
_SETS_CLOCK = StoredText(gettext_noop("sets the system clock."))
_SETS_HOST_NAME = StoredText(gettext_noop("sets the host name."))


def _find(program: str, args: list[str], text: str, depth: int) -> Classification:
    parts: list[Classification] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-delete":
            parts.append(
                result(NON_IDEMPOTENT, text, _FIND_DELETES(), "find.delete", destructive=True)
            )
        elif arg in {"-exec", "-execdir", "-ok", "-okdir"}:
            end = i + 1
            while end < len(args) and args[end] not in {";", "+"}:
                end += 1
            inner = args[i + 1 : end]
            if not inner:
                parts.append(unknown(text, _FIND_EXEC_ALONE()))
            else:
                parts.append(classify_argv(inner, depth=depth, text=text))
            i = end
        elif arg in {"-fprint", "-fprint0", "-fprintf", "-fls"}:
            parts.append(result(CONDITIONAL, text, _FIND_WRITES(), "find.write"))
        i += 1
    if not parts:
        return result(IDEMPOTENT, text, _FIND_LISTS(), "find")
    combined = parts[0]
    for part in parts[1:]:
        combined = most_conservative(combined, part)
    return combined


_SED_ADDRESS = r"(?:\d+(?:~\d+)?|\$|/(?:[^/\\\n]|\\.)*/[IM]*)"
_SED_SIMPLE = re.compile(
    rf"^\s*(?:{_SED_ADDRESS}(?:\s*,\s*(?:{_SED_ADDRESS}|[+~]\d+))?)?\s*!?\s*"
    r"(?:[pdqQ=lnNPDhHgGxz]|[qQ]\s*\d+|y(.)(?:(?!\1).|\\.)*\1(?:(?!\1).|\\.)*\1)?\s*$"
)


def _sed_substitution_is_pure(command: str) -> bool:
    body = re.sub(
        rf"^\s*(?:{_SED_ADDRESS}(?:\s*,\s*(?:{_SED_ADDRESS}|[+~]\d+))?)?\s*!?\s*", "", command
    )
    if not body.startswith("s") or len(body) < 4:
        return False
    delimiter = body[1]
    if delimiter.isalnum() or delimiter in "\\\n ":
        return False
    pieces: list[str] = []
    current = ""
    escaped = False
    for ch in body[2:]:
        if escaped:
            current += ch
            escaped = False
        elif ch == "\\":
            current += ch
            escaped = True
        elif ch == delimiter:
            pieces.append(current)
            current = ""
        else:
            current += ch
    pieces.append(current)
    if len(pieces) != 3:
        return False
    return re.fullmatch(r"[gpiImM0-9]*\s*", pieces[2]) is not None


def _sed_script_is_read_only(script: str) -> bool:
    """True only for scripts made of commands that cannot write files or run programs."""
    for command in re.split(r"[;\n]", script):
        if not command.strip():
            continue
        if not (_SED_SIMPLE.match(command) or _sed_substitution_is_pure(command)):
            return False
    return True


def _sed(program: str, args: list[str], text: str, depth: int) -> Classification:
    if "i" in short_flags(args) or has_long(args, "--in-place"):
        return result(NON_IDEMPOTENT, text, _IN_PLACE(), "sed.in_place")
    if "f" in short_flags(args) or has_long(args, "--file"):
        return unknown(text, _SED_FILE())
    scripts: list[str] = []
    i = 0
    while i < len(args):
        if args[i] in {"-e", "--expression"} and i + 1 < len(args):
            scripts.append(args[i + 1])
            i += 2
            continue
        if args[i].startswith("--expression="):
            scripts.append(args[i].split("=", 1)[1])
        i += 1
    if not scripts:
        positionals = operands(args)
        if not positionals:
            return unknown(text, _SED_NO_SCRIPT())
        scripts = positionals[:1]
    if all(_sed_script_is_read_only(script) for script in scripts):
        return result(IDEMPOTENT, text, _SED_PRINTS(), "sed")
    return unknown(text, _SED_ACTS(), "sed")


def _awk(program: str, args: list[str], text: str, depth: int) -> Classification:
    if "f" in short_flags(args) or "i" in short_flags(args):
        return unknown(text, _AWK_FILE())
    positionals = operands([a for a in args if not a.startswith("-v")])
    script = positionals[0] if positionals else ""
    if script and not re.search(r"[>|]|system|getline|fflush|close", script):
        return result(IDEMPOTENT, text, _AWK_PRINTS(), "awk")
    return unknown(text, _AWK_ACTS(), "awk")


def _sort(program: str, args: list[str], text: str, depth: int) -> Classification:
    if has_long(args, "--compress-program"):
        return unknown(text, _SORT_PROGRAM(), "sort.program")
    if "o" in short_flags(args) or has_long(args, "--output"):
        return result(CONDITIONAL, text, WRITES_OUTPUT(), "sort.output")
    return result(IDEMPOTENT, text, READ_ONLY_COMMAND(), "read_only.sort")


def _uniq(program: str, args: list[str], text: str, depth: int) -> Classification:
    if len(operands(args)) >= 2:
        return result(CONDITIONAL, text, WRITES_OUTPUT(), "uniq.output")
    return result(IDEMPOTENT, text, READ_ONLY_COMMAND(), "read_only.uniq")


def _rg(program: str, args: list[str], text: str, depth: int) -> Classification:
    if has_long(args, "--pre", "--pre-glob"):
        return unknown(text, _RG_PRE(), "rg.pre")
    return result(IDEMPOTENT, text, READ_ONLY_COMMAND(), "read_only.rg")


def _tee(program: str, args: list[str], text: str, depth: int) -> Classification:
    files = [f for f in operands(args) if f not in HARMLESS_TARGETS]
    if not files:
        return result(IDEMPOTENT, text, _TEE_COPIES(), "tee")
    if "a" in short_flags(args) or has_long(args, "--append"):
        return result(NON_IDEMPOTENT, text, _TEE_APPENDS(), "tee.append")
    return result(CONDITIONAL, text, _TEE_OVERWRITES(), "tee")


def _read_only_unless(
    name: str, flag: str, long_flag: str, effect: StoredText, rule: str
) -> ArgvClassifier:
    """A read-only command that ``-flag`` or ``long_flag`` turns into a side effect."""

    def classify(program: str, args: list[str], text: str, depth: int) -> Classification:
        if flag in short_flags(args) or has_long(args, long_flag):
            return result(NON_IDEMPOTENT, text, effect(), rule)
        return result(IDEMPOTENT, text, READ_ONLY_COMMAND(), f"read_only.{name}")

    return classify


def _hostname(program: str, args: list[str], text: str, depth: int) -> Classification:
    if operands(args):
        return result(NON_IDEMPOTENT, text, _SETS_HOST_NAME(), "hostname.set")
    return result(IDEMPOTENT, text, READ_ONLY_COMMAND(), "read_only.hostname")


PROGRAMS: dict[str, ArgvClassifier] = {
    "find": _find,
    "sed": _sed,
    "gsed": _sed,
    "awk": _awk,
    "gawk": _awk,
    "mawk": _awk,
    "sort": _sort,
    "rg": _rg,
    "uniq": _uniq,
    "tee": _tee,
    "date": _read_only_unless("date", "s", "--set", _SETS_CLOCK, "date.set"),
    "hostname": _hostname,
    "yq": _read_only_unless("yq", "i", "--inplace", _IN_PLACE, "yq.in_place"),
}
