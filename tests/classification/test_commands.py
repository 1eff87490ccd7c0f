"""run_command is classified per call from a parsed command, most dangerous part first."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.classification.shell import classify_command
from ledger.domain import Idempotency, ReplayPolicy

READ_ONLY = [
    "ls",
    "ls src",
    "ls -la /tmp",
    "pwd",
    "cat README.md",
    "rg TODO src",
    "grep -rn foo .",
    "git status",
    "git log --oneline -5",
    "git diff HEAD~1",
    "git -C repo status",
    "git show HEAD:README.md",
    "git branch",
    "wc -l a.txt",
    "head -n 20 a.txt",
    "tail -n 5 a.txt",
    "find . -name '*.py'",
    "find src -type f -newer x",
    "sed -n '1,20p' a.txt",
    "sed 's/a/b/g' a.txt",
    "echo hello",
    "ls 2>/dev/null | wc -l",
    "cat a.txt | sort | uniq -c",
    "env FOO=1 ls",
    "cd src && ls",
    "find . -exec grep -l foo {} \\;",
    "echo hi > /dev/null",
    "ls >&2",
    "du -sh .",
    "/usr/bin/ls -la",
    "npm ls",
    "pip list",
    "jq .name package.json",
    "awk '{print $1}' a.txt",
    "sha256sum a.txt",
    "FOO=1 ls",
    "tree src",
    "less README.md",
    "rg -n foo src",
]

# (command, idempotency, destructive)
WRITES = [
    ("ls; rm -rf /", Idempotency.NON_IDEMPOTENT, True),
    ("find . -delete", Idempotency.NON_IDEMPOTENT, True),
    ("sed -i s/a/b/ file", Idempotency.NON_IDEMPOTENT, False),
    ("sed -ie s/a/b/ file", Idempotency.NON_IDEMPOTENT, False),
    ("sed --in-place=.bak s/a/b/ file", Idempotency.NON_IDEMPOTENT, False),
    ("sed 's/a/b/w out' file", Idempotency.NON_IDEMPOTENT, False),
    ("sed '1e date' file", Idempotency.NON_IDEMPOTENT, False),
    ("cat a > b", Idempotency.CONDITIONAL, False),
    ("cat a >> b", Idempotency.NON_IDEMPOTENT, False),
    ("ls &> out.txt", Idempotency.CONDITIONAL, False),
    ("ls $(touch x)", Idempotency.NON_IDEMPOTENT, False),
    ("ls `touch x`", Idempotency.NON_IDEMPOTENT, False),
    ("cat <(rm x)", Idempotency.NON_IDEMPOTENT, True),
    ("echo ${x:-$(rm y)}", Idempotency.NON_IDEMPOTENT, True),
    ("npm test && npm publish", Idempotency.NON_IDEMPOTENT, False),
    ("npm test || npm publish", Idempotency.NON_IDEMPOTENT, False),
    ("npm test & npm publish", Idempotency.NON_IDEMPOTENT, False),
    ("ls\nnpm publish", Idempotency.NON_IDEMPOTENT, False),
    ("npm test", Idempotency.CONDITIONAL, False),
    ("pnpm test", Idempotency.CONDITIONAL, False),
    ("yarn test", Idempotency.CONDITIONAL, False),
    ("npm install", Idempotency.NON_IDEMPOTENT, False),
    ("npm publish", Idempotency.NON_IDEMPOTENT, False),
    ("rm -rf dist", Idempotency.NON_IDEMPOTENT, True),
    ("prisma migrate deploy", Idempotency.NON_IDEMPOTENT, True),
    ("python manage.py migrate", Idempotency.NON_IDEMPOTENT, True),
    ("sudo -u root rm x", Idempotency.NON_IDEMPOTENT, True),
    ("env -i PATH=/bin rm x", Idempotency.NON_IDEMPOTENT, True),
    ("ls | xargs rm", Idempotency.NON_IDEMPOTENT, True),
    ("xargs -n 1 rm < list", Idempotency.NON_IDEMPOTENT, True),
    ("sh -c 'ls; rm x'", Idempotency.NON_IDEMPOTENT, True),
    ('bash -lc "git push --force"', Idempotency.NON_IDEMPOTENT, True),
    ("nohup rm x &", Idempotency.NON_IDEMPOTENT, True),
    ("eval 'rm x'", Idempotency.NON_IDEMPOTENT, True),
    ("git clean -fdx", Idempotency.NON_IDEMPOTENT, True),
    ("git reset --hard HEAD~1", Idempotency.NON_IDEMPOTENT, True),
    ("git push origin main", Idempotency.NON_IDEMPOTENT, False),
    ("git commit -m x", Idempotency.NON_IDEMPOTENT, False),
    ("git diff --output=patch.diff", Idempotency.CONDITIONAL, False),
    ("dd if=/dev/zero of=disk.img", Idempotency.NON_IDEMPOTENT, True),
    ("curl -X POST https://example.invalid/charge", Idempotency.NON_IDEMPOTENT, False),
    ("./deploy.sh", Idempotency.NON_IDEMPOTENT, False),
    ("$CMD --flag", Idempotency.NON_IDEMPOTENT, False),
    ("python script.py", Idempotency.NON_IDEMPOTENT, False),
    ("python -m pytest -q", Idempotency.CONDITIONAL, False),
    ("tee out.txt", Idempotency.CONDITIONAL, False),
    ("sort -o sorted.txt a.txt", Idempotency.CONDITIONAL, False),
    ("find . -exec rm {} +", Idempotency.NON_IDEMPOTENT, True),
    ("find . -fprint out.txt", Idempotency.CONDITIONAL, False),
    ("awk '{print > \"x\"}' a", Idempotency.NON_IDEMPOTENT, False),
    ("make deploy", Idempotency.NON_IDEMPOTENT, False),
    ("echo $((1+2))", Idempotency.NON_IDEMPOTENT, False),
    ("", Idempotency.NON_IDEMPOTENT, False),
    ("frobnicate --all", Idempotency.NON_IDEMPOTENT, False),
    ("kubectl delete pod x", Idempotency.NON_IDEMPOTENT, True),
    ("terraform apply", Idempotency.NON_IDEMPOTENT, True),
    # Read-only programs made to run other programs or write files (found in review).
    ("git -c core.fsmonitor='touch x' status", Idempotency.NON_IDEMPOTENT, False),
    ("git --config-env=core.pager=X log", Idempotency.NON_IDEMPOTENT, False),
    ("git -c diff.external=rm diff", Idempotency.NON_IDEMPOTENT, True),
    ("git --exec-path=/tmp/evil status", Idempotency.NON_IDEMPOTENT, False),
    ("git diff --ext-diff", Idempotency.NON_IDEMPOTENT, False),
    ("git grep -O foo", Idempotency.NON_IDEMPOTENT, False),
    ("env -S 'touch x' ls", Idempotency.NON_IDEMPOTENT, False),
    ("env GIT_EXTERNAL_DIFF=./x git diff", Idempotency.NON_IDEMPOTENT, False),
    ("GIT_PAGER='touch x' git log", Idempotency.NON_IDEMPOTENT, False),
    ("LD_PRELOAD=/tmp/x.so ls", Idempotency.NON_IDEMPOTENT, False),
    ("PAGER=./evil man ls", Idempotency.NON_IDEMPOTENT, False),
    ("rg --pre ./decode foo", Idempotency.NON_IDEMPOTENT, False),
    ("sort --compress-program=./x big.txt", Idempotency.NON_IDEMPOTENT, False),
    ("tree -o out.txt", Idempotency.CONDITIONAL, False),
    ("less -o log.txt file", Idempotency.CONDITIONAL, False),
    ("less -O log.txt file", Idempotency.CONDITIONAL, False),
]


@pytest.mark.parametrize("command", READ_ONLY)
def test_read_only_commands_replay_automatically(command: str) -> None:
    result = classify_command(command)
    assert (result.idempotency, result.replay_policy) == (Idempotency.IDEMPOTENT, ReplayPolicy.AUTO)
    assert not result.destructive
    assert result.reason and result.rule.startswith("command.")


@pytest.mark.parametrize(("command", "idempotency", "destructive"), WRITES)
def test_writing_commands_are_never_auto(
    command: str, idempotency: Idempotency, destructive: bool
) -> None:
    result = classify_command(command)
    assert result.idempotency is idempotency, result.reason
    assert result.replay_policy is not ReplayPolicy.AUTO
    assert result.destructive is destructive


@pytest.mark.parametrize(
    ("command", "idempotency", "rule"),
    [
        ("date", Idempotency.IDEMPOTENT, "command.read_only.date"),
        ("date +%s", Idempotency.IDEMPOTENT, "command.read_only.date"),
        ("date -s 2030-01-01", Idempotency.NON_IDEMPOTENT, "command.date.set"),
        ("date --set=2030-01-01", Idempotency.NON_IDEMPOTENT, "command.date.set"),
        ("yq .name a.yaml", Idempotency.IDEMPOTENT, "command.read_only.yq"),
        ("yq -i '.a = 1' a.yaml", Idempotency.NON_IDEMPOTENT, "command.yq.in_place"),
        ("yq --inplace '.a = 1' a.yaml", Idempotency.NON_IDEMPOTENT, "command.yq.in_place"),
        ("hostname", Idempotency.IDEMPOTENT, "command.read_only.hostname"),
        ("hostname box", Idempotency.NON_IDEMPOTENT, "command.hostname.set"),
    ],
)
def test_a_flag_or_an_argument_turns_a_read_only_command_into_a_write(
    command: str, idempotency: Idempotency, rule: str
) -> None:
    result = classify_command(command)
    assert (result.idempotency, result.rule) == (idempotency, rule), result.reason


def test_seed_examples() -> None:
    assert classify_command("ls src").replay_policy is ReplayPolicy.AUTO
    assert classify_command("npm test").replay_policy is ReplayPolicy.ASK
    assert classify_command("npm install").replay_policy is ReplayPolicy.NEVER
    assert classify_command("npm publish").replay_policy is ReplayPolicy.NEVER
    assert classify_command("rm -rf dist").destructive
    assert classify_command("prisma migrate deploy").replay_policy is ReplayPolicy.NEVER


def test_reason_names_the_most_dangerous_part() -> None:
    result = classify_command("ls && git status && rm -rf build")
    assert "rm -rf build" in result.reason


def test_quoted_operators_are_not_split() -> None:
    result = classify_command("echo 'a; rm -rf /' \"b && npm publish\"")
    assert result.idempotency is Idempotency.IDEMPOTENT


def _nest(command: str, times: int) -> str:
    for _ in range(times):
        command = "sh -c " + shlex.quote(command)
    return command


def test_nested_shells_are_unwrapped() -> None:
    assert classify_command("sh -c \"bash -c 'git status'\"").replay_policy is ReplayPolicy.AUTO
    assert classify_command(_nest("rm -rf /", 2)).destructive


def test_nested_shells_beyond_the_limit_are_not_understood() -> None:
    assert classify_command("eval " * 3 + "ls").replay_policy is ReplayPolicy.AUTO
    result = classify_command("eval " * 8 + "ls")
    assert result.replay_policy is ReplayPolicy.NEVER
    assert result.rule == "command.too_deep"


_read_only = st.sampled_from(READ_ONLY)
_writes = st.sampled_from([c for c, _i, _d in WRITES if c])
_separators = st.sampled_from(["; ", " && ", " || ", " | ", " & ", "\n"])


@settings(max_examples=300, deadline=None)
@given(base=st.one_of(_read_only, _writes), write=_writes, separator=_separators)
def test_appending_a_write_never_makes_a_command_less_conservative(
    base: str, write: str, separator: str
) -> None:
    combined = classify_command(base + separator + write)
    alone = classify_command(write)
    assert combined.idempotency.rank >= classify_command(base).idempotency.rank
    assert combined.idempotency.rank >= alone.idempotency.rank
    assert combined.destructive or not alone.destructive


@settings(max_examples=200, deadline=None)
@given(write=_writes, wrapper=st.sampled_from(["sudo ", "env A=1 ", "nohup ", "timeout 5 "]))
def test_wrappers_never_hide_a_write(write: str, wrapper: str) -> None:
    if "\n" in write or any(op in write for op in (";", "&", "|")):
        return  # a wrapper only applies to the first simple command
    inner = classify_command(write)
    wrapped = classify_command(wrapper + write)
    assert wrapped.idempotency.rank >= inner.idempotency.rank


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_any_text_classifies_without_error(text: str) -> None:
    result = classify_command(text)
    assert result.reason
    fallback = {
        "command.not_understood",
        "command.unparsed",
        "command.unknown_program",
        "command.empty",
        "command.too_long",
        "command.too_deep",
    }
    if result.rule in fallback:
        assert result.replay_policy is ReplayPolicy.NEVER
