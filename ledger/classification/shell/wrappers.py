"""Programs that run another program: ``env``, ``sudo``, ``nice``, ``timeout`` and the other
wrappers, ``xargs`` and ``command``. Each one's own options are set aside and the command it runs
is classified in its place.
"""

from __future__ import annotations

from django.utils.translation import gettext_noop

from ledger.classification import Classification
from ledger.classification.shell.argv import ArgvClassifier, dangerous_variable, short_flags
from ledger.classification.shell.programs import (
    IDEMPOTENT,
    classify_argv,
    result,
    unknown,
)
from ledger.stored_text import StoredText

_DANGEROUS_VARIABLE = StoredText(gettext_noop("setting %(name)s can run code."))
_SPLIT_STRING = StoredText(
    gettext_noop("`env -S` runs a command line the classifier does not parse.")
)
_ALONE_PRINTS = StoredText(gettext_noop("`%(program)s` alone only prints."))
_NO_COMMAND = StoredText(gettext_noop("`%(program)s` without a command is not understood."))
_XARGS_ALONE = StoredText(gettext_noop("`xargs` alone only echoes its input."))
_LOOKS_UP = StoredText(gettext_noop("looks a command up."))


# Wrappers: strip their own options, then classify what they run.
def _wrapper(options_with_value: set[str], *, bare_is_read: bool = False) -> ArgvClassifier:
    def classify(program: str, args: list[str], text: str, depth: int) -> Classification:
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "--":
                i += 1
                break
            if program == "env" and "=" in arg and not arg.startswith("-"):
                if dangerous_variable(arg.split("=", 1)[0]):
                    return unknown(
                        text,
                        _DANGEROUS_VARIABLE(name=arg.split("=", 1)[0]),
                        "env.dangerous_variable",
                    )
                i += 1
                continue
            if program == "env" and (arg.startswith("-S") or arg.startswith("--split-string")):
                return unknown(
                    text,
                    _SPLIT_STRING(),
                    "env.split_string",
                )
            if not arg.startswith("-") or arg == "-":
                break
            if arg in options_with_value:
                i += 2
                continue
            i += 1
        if program == "timeout" and i < len(args):
            i += 1  # the duration
        rest = args[i:]
        if not rest:
            if bare_is_read:
                return result(IDEMPOTENT, text, _ALONE_PRINTS(program=program), program)
            return unknown(text, _NO_COMMAND(program=program))
        return classify_argv(rest, depth=depth, text=text)

    return classify


def _xargs(program: str, args: list[str], text: str, depth: int) -> Classification:
    with_value = {
        "-a",
        "-d",
        "-E",
        "-e",
        "-I",
        "-i",
        "-L",
        "-l",
        "-n",
        "-P",
        "-s",
        "--arg-file",
        "--delimiter",
        "--eof",
        "--max-lines",
        "--max-args",
        "--max-procs",
        "--max-chars",
        "--replace",
    }
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in with_value else 1
    rest = args[i:]
    if not rest:
        return result(IDEMPOTENT, text, _XARGS_ALONE(), "xargs")
    return classify_argv(rest, depth=depth, text=text)


def _command_builtin(program: str, args: list[str], text: str, depth: int) -> Classification:
    if short_flags(args) & {"v", "V"}:
        return result(IDEMPOTENT, text, _LOOKS_UP(), "command_lookup")
    rest = [a for a in args if a != "-p"]
    if not rest:
        return unknown(text, _NO_COMMAND(program="command"))
    return classify_argv(rest, depth=depth, text=text)


PROGRAMS: dict[str, ArgvClassifier] = {
    "env": _wrapper({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}, bare_is_read=True),
    "sudo": _wrapper({"-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "-T"}),
    "doas": _wrapper({"-u", "-C"}),
    "nice": _wrapper({"-n", "--adjustment"}),
    "ionice": _wrapper({"-c", "-n", "-p", "-P", "-u"}),
    "nohup": _wrapper(set()),
    "time": _wrapper({"-f", "-o", "--format", "--output"}),
    "timeout": _wrapper({"-s", "--signal", "-k", "--kill-after"}),
    "stdbuf": _wrapper({"-i", "-o", "-e"}),
    "chronic": _wrapper(set()),
    "exec": _wrapper({"-a"}),
    "xargs": _xargs,
    "command": _command_builtin,
    "builtin": _command_builtin,
}
