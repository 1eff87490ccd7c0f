"""A simple command's argument vector: what a program's classifier of one looks like
(``ArgvClassifier``), and reading its words: short option letters, long options, operands, a
bare version or help request, and the variables through which a program can be made to run
another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ledger.classification import Classification
from ledger.classification.shell.tables import DANGEROUS_VARIABLE

# What classifies one simple command: (program, its arguments, the command's text as shown,
# how deeply shells are nested).
ArgvClassifier = Callable[[str, list[str], str, int], Classification]


def dangerous_variable(name: str) -> bool:
    """Variables through which a read-only program can be made to run another program."""
    return bool(DANGEROUS_VARIABLE.match(name))


def short_flags(args: Sequence[str]) -> set[str]:
    """Letters of every short-option cluster (``-rf`` gives r and f), up to ``--``."""
    letters: set[str] = set()
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("-") and not arg.startswith("--") and len(arg) > 1:
            letters.update(arg[1:])
    return letters


def has_long(args: Sequence[str], *names: str) -> bool:
    for arg in args:
        if arg == "--":
            return False
        if any(arg == name or arg.startswith(name + "=") for name in names):
            return True
    return False


def operands(args: Sequence[str]) -> list[str]:
    """The words that are not options, a lone ``-`` among them, and every word after ``--``."""
    out: list[str] = []
    after_dashdash = False
    for arg in args:
        if after_dashdash:
            out.append(arg)
        elif arg == "--":
            after_dashdash = True
        elif not arg.startswith("-") or arg == "-":
            out.append(arg)
    return out


def version_or_help(args: Sequence[str]) -> bool:
    return len(args) == 1 and args[0] in {"--version", "-V", "--help", "-h", "version"}
