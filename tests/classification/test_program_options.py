"""The options through which a trusted read-only program runs another program or writes a
file: a table per program, each row a command that must never come out ``auto``."""

from __future__ import annotations

import pytest

from ledger.classification.shell import classify_command
from ledger.classification.shell.tables import ACTING_OPTIONS, READ_ONLY
from ledger.domain import Idempotency, ReplayPolicy

# (command, the class it must have). Runs another program: never; writes a file: ask.
ACTING = [
    ("less '+!rm -rf /' notes.txt", Idempotency.NON_IDEMPOTENT),
    ("less +!id notes.txt", Idempotency.NON_IDEMPOTENT),
    ("less +:e/etc/shadow notes.txt", Idempotency.NON_IDEMPOTENT),
    ("less -k keys notes.txt", Idempotency.NON_IDEMPOTENT),
    ("less --lesskey-file=keys notes.txt", Idempotency.NON_IDEMPOTENT),
    ("less --lesskey-src keys notes.txt", Idempotency.NON_IDEMPOTENT),
    ("less -o copy.txt notes.txt", Idempotency.CONDITIONAL),
    ("less --log-file=copy.txt notes.txt", Idempotency.CONDITIONAL),
    ("more '+!touch x' notes.txt", Idempotency.NON_IDEMPOTENT),
    ("ack --pager='sh -c id' foo", Idempotency.NON_IDEMPOTENT),
    ("ack --output='`id`' foo", Idempotency.NON_IDEMPOTENT),
    ("ag --pager 'sh -c id' foo", Idempotency.NON_IDEMPOTENT),
    ("rg --pre ./script foo", Idempotency.NON_IDEMPOTENT),
    ("sort --compress-program=sh data", Idempotency.NON_IDEMPOTENT),
    ("sort -o out data", Idempotency.CONDITIONAL),
    ("file -C -m magic", Idempotency.CONDITIONAL),
    ("lsof -Db", Idempotency.CONDITIONAL),
    ("tree -o out.txt", Idempotency.CONDITIONAL),
    ("git -c core.pager='sh -c id' log", Idempotency.NON_IDEMPOTENT),
    ("git log --ext-diff -p", Idempotency.NON_IDEMPOTENT),
    ("git diff --textconv", Idempotency.NON_IDEMPOTENT),
    ("git cat-file --filters HEAD:a", Idempotency.NON_IDEMPOTENT),
    ("git grep -Ovim foo", Idempotency.NON_IDEMPOTENT),
    ("git ls-remote --upload-pack='sh -c id' origin", Idempotency.NON_IDEMPOTENT),
    ("git ls-remote -u 'sh -c id' origin", Idempotency.NON_IDEMPOTENT),
    ("git help --web log", Idempotency.NON_IDEMPOTENT),
    ("git log --output=out.txt", Idempotency.CONDITIONAL),
    ("LESSOPEN='|sh -c id %s' less notes.txt", Idempotency.NON_IDEMPOTENT),
    ("PAGER='sh -c id' git log", Idempotency.NON_IDEMPOTENT),
]


@pytest.mark.parametrize(("command", "expected"), ACTING, ids=[c for c, _ in ACTING])
def test_an_option_that_runs_a_program_or_writes_is_never_auto(
    command: str, expected: Idempotency
) -> None:
    classification = classify_command(command)
    assert classification.replay_policy is not ReplayPolicy.AUTO
    assert classification.idempotency is expected


@pytest.mark.parametrize(
    "command",
    [
        "less notes.txt",
        "less -R +5 notes.txt",
        "more +10 notes.txt",
        "more +/error log.txt",
        "ack foo src",
        "ag foo",
        "file notes.txt",
        "lsof -p 1",
        "tree -L 2",
        "git log -p",
    ],
)
def test_the_same_programs_without_those_options_stay_read_only(command: str) -> None:
    assert classify_command(command).replay_policy is ReplayPolicy.AUTO


def test_every_trusted_read_only_program_says_which_of_its_options_act() -> None:
    """Trusting a program means listing its acting options (or none): the table and the set
    of read-only programs are the same."""
    assert set(ACTING_OPTIONS) == set(READ_ONLY)
