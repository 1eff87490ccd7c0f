"""Per-call classification of shell commands (``run_command`` and friends).

The command is parsed into a syntax tree with bashlex (quoting, lists, pipelines, ``&``,
newlines, redirections, command and process substitutions, compound commands). Every simple
command found anywhere in the tree is classified on its own, wrappers such as ``env``, ``sudo``,
``xargs`` and ``sh -c`` are unwrapped, and the most conservative result wins. Anything the
classifier does not understand is ``non_idempotent`` / ``never``: an allow-list, never a
deny-list, so a new dangerous program is safe by default.

The modules, top down; none imports one above it (a contract in pyproject.toml holds this):

- ``walker``: the command line's syntax tree, and the shells and ``eval`` that run one;
- ``wrappers``, ``readers``, ``git``, ``toolchains``, ``infrastructure``: the programs with a
  classifier of their own, by family, each declaring its ``PROGRAMS``;
- ``programs``: one argument vector classified by its program's classifier (``CLASSIFIERS``,
  which this package fills from the families' ``PROGRAMS``) or else by the tables;
- ``argv``: the signature of a program's classifier, and reading options and operands;
- ``tables``: the allow-lists and deny-lists, data only.
"""

from __future__ import annotations

from ledger.classification.shell import git, infrastructure, readers, toolchains, walker, wrappers
from ledger.classification.shell.programs import CLASSIFIERS, classify_argv
from ledger.classification.shell.walker import classify_command

CLASSIFIERS.update(
    wrappers.PROGRAMS
    | walker.PROGRAMS
    | readers.PROGRAMS
    | git.PROGRAMS
    | toolchains.PROGRAMS
    | infrastructure.PROGRAMS
)

__all__ = ["classify_argv", "classify_command"]
