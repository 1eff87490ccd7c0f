"""``git``: reading subcommands replay, listing forms of writing ones too; a subcommand that
discards work or history is destructive, and configuration given on the command line or an
option that runs another program is not understood.
"""

from __future__ import annotations

from django.utils.translation import gettext_noop

from ledger.classification import Classification
from ledger.classification.shell.argv import ArgvClassifier, has_long, operands, short_flags
from ledger.classification.shell.programs import (
    CONDITIONAL,
    IDEMPOTENT,
    NON_IDEMPOTENT,
    WRITES_OUTPUT,
    result,
    unknown,
)
from ledger.classification.shell.tables import (
    GIT_DESTRUCTIVE,
    GIT_GLOBAL_WITH_VALUE,
    GIT_READ,
    GIT_WRITE,
)
from ledger.stored_text import StoredText

_VERSION = StoredText(gettext_noop("prints git's version or help."))
_CONFIG_OVERRIDE = StoredText(
    gettext_noop(
        "git configuration on the command line can run any program "
        "(core.fsmonitor, diff.external, ...)."
    )
)
_USAGE = StoredText(gettext_noop("prints git's usage."))
_EXTERNAL = StoredText(gettext_noop("runs an external program."))
_READS = StoredText(gettext_noop("`git %(sub)s` only reads the repository."))
_LISTS = StoredText(gettext_noop("`git %(sub)s` only lists here."))
_DISCARDS = StoredText(gettext_noop("`git %(sub)s` discards work or history."))
_FETCH = StoredText(gettext_noop("updates remote-tracking refs."))
_CHANGES = StoredText(gettext_noop("`git %(sub)s` changes the repository or a remote."))
_UNKNOWN = StoredText(gettext_noop("`git %(sub)s` is not a known git command."))


def _git_read_runs_a_program(sub: str, args: list[str]) -> bool:
    """A reading git command told to run another program: an external diff, a pager, the
    repository's text conversion or filter programs, a browser, a remote upload-pack."""
    if has_long(args, "--ext-diff", "--open-files-in-pager", "--textconv", "--filters"):
        return True
    if sub == "grep" and any(a.startswith("-O") for a in args):
        return True
    if sub == "ls-remote" and (has_long(args, "--upload-pack") or "u" in short_flags(args)):
        return True
    return sub == "help" and (has_long(args, "--web") or "w" in short_flags(args))


def _git_read_variant(sub: str, args: list[str]) -> bool:
    flags = short_flags(args)
    positionals = operands(args)
    if sub == "branch":
        listing = {
            "-a",
            "-r",
            "-l",
            "--list",
            "-v",
            "-vv",
            "--show-current",
            "--all",
            "--remotes",
            "--contains",
            "--merged",
            "--no-merged",
            "--verbose",
        }
        return all(a in listing for a in args if a.startswith("-")) and (
            not positionals
            or bool({"-l", "--list", "--contains", "--merged", "--no-merged"} & set(args))
        )
    if sub == "tag":
        return not args or (("l" in flags or "--list" in args) and "d" not in flags)
    if sub == "remote":
        return (
            not args
            or args in (["-v"], ["--verbose"])
            or (bool(args) and args[0] in {"show", "get-url"})
        )
    if sub == "config":
        return bool(set(args) & {"--get", "--get-all", "--get-regexp", "--list", "-l"})
    if sub == "stash":
        return bool(args) and args[0] in {"list", "show"}
    if sub == "worktree":
        return bool(args) and args[0] == "list"
    if sub == "submodule":
        return bool(args) and args[0] == "status"
    if sub == "notes":
        return bool(args) and args[0] in {"list", "show"}
    if sub == "reflog":
        return not args or args[0] == "show"
    return False


def _git_destructive(sub: str, args: list[str]) -> bool:
    flags = short_flags(args)
    if sub in GIT_DESTRUCTIVE:
        return True
    if sub == "reset":
        return "--hard" in args or "--merge" in args or "--keep" in args
    if sub == "push":
        return (
            "f" in flags
            or has_long(args, "--force", "--force-with-lease", "--delete", "--mirror", "--prune")
            or any(a.startswith("+") or a.startswith(":") for a in operands(args))
        )
    if sub == "branch":
        return "D" in flags or ("--delete" in args and "--force" in args)
    if sub == "checkout":
        return "--" in args or "f" in flags or has_long(args, "--force")
    if sub == "restore":
        return "--staged" not in args or "--worktree" in args
    if sub == "stash":
        return bool(args) and args[0] in {"drop", "clear"}
    if sub == "update-ref":
        return "d" in flags
    if sub == "tag":
        return "d" in flags
    return False


def _git(program: str, args: list[str], text: str, depth: int) -> Classification:
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] in {"--version", "--help"}:
            return result(IDEMPOTENT, text, _VERSION(), "git.version")
        if args[i] in {"-c", "--config-env"} or args[i].startswith(
            ("--config-env=", "--exec-path")
        ):
            return unknown(text, _CONFIG_OVERRIDE(), "git.config_override")
        i += 2 if args[i] in GIT_GLOBAL_WITH_VALUE else 1
    if i >= len(args):
        return result(IDEMPOTENT, text, _USAGE(), "git")
    sub, rest = args[i], args[i + 1 :]
    if sub in GIT_READ:
        if _git_read_runs_a_program(sub, rest):
            return unknown(text, _EXTERNAL(), "git.external")
        if has_long(rest, "--output"):
            return result(CONDITIONAL, text, WRITES_OUTPUT(), "git.output")
        return result(IDEMPOTENT, text, _READS(sub=sub), f"git.{sub}")
    if sub in GIT_WRITE or sub in GIT_DESTRUCTIVE:
        if _git_read_variant(sub, rest):
            return result(IDEMPOTENT, text, _LISTS(sub=sub), f"git.{sub}.list")
        if _git_destructive(sub, rest):
            return result(NON_IDEMPOTENT, text, _DISCARDS(sub=sub), f"git.{sub}", destructive=True)
        if sub == "fetch":
            return result(CONDITIONAL, text, _FETCH(), "git.fetch")
        return result(NON_IDEMPOTENT, text, _CHANGES(sub=sub), f"git.{sub}")
    return unknown(text, _UNKNOWN(sub=sub), "git.unknown")


PROGRAMS: dict[str, ArgvClassifier] = {
    "git": _git,
}
