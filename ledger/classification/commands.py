"""Per-call classification of shell commands (``run_command`` and friends).

The command is parsed into a syntax tree with bashlex (quoting, lists, pipelines, ``&``,
newlines, redirections, command and process substitutions, compound commands). Every simple
command found anywhere in the tree is classified on its own, wrappers such as ``env``, ``sudo``,
``xargs`` and ``sh -c`` are unwrapped, and the most conservative result wins. Anything the
classifier does not understand is ``non_idempotent`` / ``never``: an allow-list, never a
deny-list, so a new dangerous program is safe by default.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import bashlex
import bashlex.errors

from ledger.classification import Classification, most_conservative
from ledger.domain import Idempotency

MAX_COMMAND_LENGTH = 20_000
MAX_NESTING = 4  # sh -c "sh -c '...'" deeper than this is not understood

IDEMPOTENT = Idempotency.IDEMPOTENT
CONDITIONAL = Idempotency.CONDITIONAL
NON_IDEMPOTENT = Idempotency.NON_IDEMPOTENT

_HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
_TRUSTED_BIN_DIRS = ("/bin/", "/usr/bin/", "/usr/local/bin/", "/sbin/", "/usr/sbin/")


def _result(
    idempotency: Idempotency, part: str, why: str, rule: str, *, destructive: bool = False
) -> Classification:
    return Classification.of(
        idempotency,
        reason=f"`{part}`: {why}" if part else why,
        rule=f"command.{rule}",
        destructive=destructive,
    )


def _unknown(part: str, why: str, rule: str = "not_understood") -> Classification:
    destructive = _looks_destructive(part)
    if destructive:
        why += " It mentions a destructive program, so it is flagged destructive."
    return _result(NON_IDEMPOTENT, part, why, rule, destructive=destructive)


_ROUGH_SEPARATORS = re.compile(r"[;&|\n()`{}]+|\$\(|<\(|>\(")
_DESTRUCTIVE_WORDS = frozenset(
    {
        "migrate",
        "db:migrate",
        "destroy",
        "delete",
        "-delete",
        "clean",
        "--hard",
        "--force",
        "-rf",
        "-fr",
        "drop",
        "truncate",
        "prune",
    }
)
_in_fallback: ContextVar[bool] = ContextVar("_in_fallback", default=False)


def _looks_destructive(text: str) -> bool:
    """A lexical fallback for text that was not understood: could any part of it destroy?

    The text is cut at anything that looks like a shell operator and each piece is classified
    as a plain argument vector, so the program tables decide here too; any word that names a
    destructive action also counts. This only sets the flag: the result stays ``never``.
    """
    words = set(re.split(r"[^A-Za-z0-9_.:-]+", text))
    if words & (_DESTRUCTIVE.keys() | _DESTRUCTIVE_WORDS):
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


def classify_command(command: str) -> Classification:
    """Classify one shell command line by its most dangerous part."""
    return _classify_source(command, depth=0)


def _classify_source(command: str, *, depth: int) -> Classification:
    shown = _shorten(command)
    if not command.strip():
        return _unknown(shown, "an empty command is not understood.", "empty")
    if len(command) > MAX_COMMAND_LENGTH:
        return _unknown(shown, "the command is too long to classify.", "too_long")
    if "\x00" in command:
        return _unknown(shown, "the command contains a NUL byte.", "control_character")
    if depth > MAX_NESTING:
        return _unknown(shown, "shells are nested too deeply to classify.", "too_deep")
    try:
        trees = bashlex.parse(command)
    except bashlex.errors.ParsingError as exc:
        return _unknown(shown, f"the shell syntax could not be parsed ({exc.message}).", "unparsed")
    except Exception as exc:  # bashlex raises assorted errors on syntax it does not support
        return _unknown(shown, f"the shell syntax could not be parsed ({exc}).", "unparsed")
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
            return _unknown(_shorten(self.source), "no command was found.", "empty")
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
            self.parts.append(
                _unknown(self._text(node), f"shell construct '{kind}' is not understood.")
            )

    def _text(self, node: Any) -> str:
        start, end = node.pos
        return _shorten(self.source[start:end])

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
                    self.parts.append(
                        _unknown(self._text(part), "a parameter expansion runs code.")
                    )
            elif part.kind == "tilde":
                continue
            else:
                self.parts.append(_unknown(self._text(part), f"'{part.kind}' is not understood."))
        return dynamic

    def _command(self, node: Any) -> None:
        argv: list[str] = []
        dynamic_program = False
        for part in node.parts:
            if part.kind == "assignment":
                self._word(part)
                name = part.word.split("=", 1)[0]
                if _dangerous_variable(name):
                    self.parts.append(
                        _unknown(
                            self._text(part),
                            f"setting {name} can make the command run other programs.",
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
                self.parts.append(_unknown(self._text(part), f"'{part.kind}' is not understood."))
        text = self._text(node)
        if dynamic_program:
            self.parts.append(_unknown(text, "the program name is computed at run time."))
        elif not argv:
            self.parts.append(_result(IDEMPOTENT, text, "only sets shell variables.", "assign"))
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
        if path in _HARMLESS_TARGETS:
            return
        if kind in {">>", "&>>"}:
            self.parts.append(
                _result(
                    NON_IDEMPOTENT, text, "appends to a file; a repeat appends again.", "append"
                )
            )
        else:
            self.parts.append(
                _result(
                    CONDITIONAL, text, "overwrites a file; replay needs a hash check.", "redirect"
                )
            )


# --- Programs ---------------------------------------------------------------------------------

ArgvClassifier = Callable[[str, list[str], str, int], Classification]


def classify_argv(argv: Sequence[str], *, depth: int = 0, text: str = "") -> Classification:
    """Classify one simple command given as an argument vector."""
    text = text or _shorten(" ".join(argv))
    program = _program_name(argv[0])
    if program is None:
        return _unknown(text, "runs a program by a path the classifier cannot vouch for.")
    args = list(argv[1:])
    special = _PROGRAMS.get(program)
    if special is not None:
        return special(program, args, text, depth)
    if program in _READ_ONLY:
        return _read_only_unless_an_option_acts(program, args, text)
    if program in _DESTRUCTIVE:
        return _result(
            NON_IDEMPOTENT, text, _DESTRUCTIVE[program], f"destructive.{program}", destructive=True
        )
    if program in _WRITES:
        return _result(NON_IDEMPOTENT, text, _WRITES[program], f"writes.{program}")
    return _unknown(text, f"'{program}' is not a known command.", "unknown_program")


_DANGEROUS_VARIABLE = re.compile(
    r"^(LD_\w+|DYLD_\w+|\w*PAGER|\w*EDITOR|VISUAL|BASH_ENV|ENV|SHELLOPTS|PROMPT_COMMAND|IFS|"
    r"PATH|GIT_\w+|LESSOPEN|LESSCLOSE|PYTHON\w*|NODE_OPTIONS|PERL5\w*|RUBYOPT|\w+_COMMAND)$"
)


def _dangerous_variable(name: str) -> bool:
    """Variables through which a read-only program can be made to run another program."""
    return bool(_DANGEROUS_VARIABLE.match(name))


def _program_name(word: str) -> str | None:
    if "/" not in word:
        return word
    if word.startswith(_TRUSTED_BIN_DIRS) and word.count("/") >= 2:
        return word.rsplit("/", 1)[1]
    return None


def _shorten(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _short_flags(args: Sequence[str]) -> set[str]:
    """Letters of every short-option cluster (``-rf`` gives r and f), up to ``--``."""
    letters: set[str] = set()
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("-") and not arg.startswith("--") and len(arg) > 1:
            letters.update(arg[1:])
    return letters


def _has_long(args: Sequence[str], *names: str) -> bool:
    for arg in args:
        if arg == "--":
            return False
        if any(arg == name or arg.startswith(name + "=") for name in names):
            return True
    return False


def _positionals(args: Sequence[str]) -> list[str]:
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


_READ_ONLY = frozenset(
    [
        "pwd",
        "ls",
        "cat",
        "head",
        "tail",
        "wc",
        "echo",
        "printf",
        "grep",
        "egrep",
        "fgrep",
        "rg",
        "ag",
        "ack",
        "which",
        "whoami",
        "id",
        "stat",
        "file",
        "du",
        "df",
        "tree",
        "diff",
        "cmp",
        "comm",
        "cut",
        "tr",
        "basename",
        "dirname",
        "realpath",
        "readlink",
        "true",
        "false",
        "test",
        "[",
        "jq",
        "nl",
        "uname",
        "ps",
        "printenv",
        "locale",
        "column",
        "fold",
        "fmt",
        "rev",
        "tac",
        "od",
        "hexdump",
        "strings",
        "less",
        "more",
        "seq",
        "expr",
        "sleep",
        "type",
        "cd",
        "sha1sum",
        "sha224sum",
        "sha256sum",
        "sha384sum",
        "sha512sum",
        "md5sum",
        "b2sum",
        "cksum",
        "sum",
        "whereis",
        "lsof",
        "free",
        "uptime",
        "nproc",
        "groups",
        "tty",
        "arch",
        "getconf",
        "cal",
        "dig",
        "nslookup",
        "host",
        "ping",
        "pgrep",
        "pstree",
        "users",
        "who",
        "w",
    ]
)


@dataclass(frozen=True, slots=True)
class ActingOptions:
    """The options through which a read-only program runs another program or writes a file:
    short option letters, long options (``--name`` or ``--name=value``) and word prefixes
    (``less +!cmd``). Anything not in the table does neither."""

    runs_short: str = ""
    runs_long: tuple[str, ...] = ()
    runs_prefix: tuple[str, ...] = ()
    writes_short: str = ""
    writes_long: tuple[str, ...] = ()


_NONE = ActingOptions()
# Every program of ``_READ_ONLY`` has its entry (a test holds the two together), so trusting a
# new program means saying which of its options act.
_ACTING_OPTIONS: dict[str, ActingOptions] = {
    **dict.fromkeys(_READ_ONLY, _NONE),
    # ``+cmd`` runs a less command at start (``+!cmd`` a shell command); a lesskey file can bind
    # commands and set LESSOPEN; -o/-O copy the input to a log file.
    "less": ActingOptions(
        runs_short="k",
        runs_long=("--lesskey-file", "--lesskey-src", "--lesskey-content"),
        runs_prefix=("+",),
        writes_short="oO",
        writes_long=("--log-file", "--LOG-FILE"),
    ),
    "more": ActingOptions(runs_prefix=("+",)),
    # --pager runs a program; --output evaluates a Perl expression.
    "ack": ActingOptions(runs_long=("--pager", "--output")),
    "ag": ActingOptions(runs_long=("--pager",)),
    # -C compiles a magic file, writing magic.mgc.
    "file": ActingOptions(writes_short="C", writes_long=("--compile",)),
    # -D builds or updates lsof's device cache file.
    "lsof": ActingOptions(writes_short="D"),
    "tree": ActingOptions(writes_short="o"),
}
# ``+N`` (a line) and ``+/pattern`` (a search) only position a pager's view.
_PAGER_POSITION = re.compile(r"^\+(\d+|/[^!|]*)$")


def _read_only_unless_an_option_acts(program: str, args: list[str], text: str) -> Classification:
    acting = _ACTING_OPTIONS.get(program, _NONE)
    words = args[: args.index("--")] if "--" in args else args
    prefixed = [w for w in words if w.startswith(acting.runs_prefix)] if acting.runs_prefix else []
    if program in {"less", "more"}:
        prefixed = [w for w in prefixed if not _PAGER_POSITION.match(w)]
    if (
        prefixed
        or set(acting.runs_short) & _short_flags(args)
        or _has_long(args, *acting.runs_long)
    ):
        return _unknown(text, f"this `{program}` option runs another program.", f"{program}.runs")
    if set(acting.writes_short) & _short_flags(args) or _has_long(args, *acting.writes_long):
        return _result(CONDITIONAL, text, "writes its output to a file.", f"{program}.output")
    return _result(IDEMPOTENT, text, "a read-only command.", f"read_only.{program}")


_WRITES = {
    **dict.fromkeys(["cp", "mv", "ln", "install", "rsync"], "copies or moves files."),
    **dict.fromkeys(["mkdir", "touch", "mkfifo", "mknod"], "creates files or directories."),
    **dict.fromkeys(["chmod", "chown", "chgrp", "setfacl", "chattr"], "changes file metadata."),
    **dict.fromkeys(
        ["curl", "wget", "ssh", "scp", "sftp", "ftp", "nc", "telnet"],
        "talks to another host; the request may have side effects there.",
    ),
    **dict.fromkeys(
        [
            "kill",
            "pkill",
            "killall",
            "reboot",
            "shutdown",
            "halt",
            "poweroff",
            "systemctl",
            "service",
            "crontab",
            "at",
            "launchctl",
        ],
        "changes running processes or the system.",
    ),
    **dict.fromkeys(
        [
            "apt",
            "apt-get",
            "dpkg",
            "yum",
            "dnf",
            "apk",
            "brew",
            "snap",
            "gem",
            "poetry",
            "uv",
            "pipx",
            "conda",
            "composer",
            "bundle",
        ],
        "installs or builds software.",
    ),
    **dict.fromkeys(
        ["psql", "mysql", "sqlite3", "redis-cli", "mongo", "mongosh"],
        "runs statements against a database.",
    ),
    **dict.fromkeys(
        [
            "node",
            "ruby",
            "perl",
            "php",
            "deno",
            "bun",
            "java",
            "npx",
            "pnpx",
            "bunx",
            "source",
            ".",
        ],
        "runs code the classifier cannot see.",
    ),
    **dict.fromkeys(
        ["helm", "aws", "gcloud", "az", "gh", "hub", "glab"],
        "changes remote infrastructure or services.",
    ),
    "patch": "changes files.",
    "split": "writes files.",
    "csplit": "writes files.",
    "tar": "may extract or create archives.",
    "unzip": "extracts files.",
    "zip": "creates archives.",
    "gzip": "replaces files with compressed ones.",
    "gunzip": "replaces files with decompressed ones.",
    "vi": "opens an editor.",
    "vim": "opens an editor.",
    "nano": "opens an editor.",
    "emacs": "opens an editor.",
}

_DESTRUCTIVE = {
    **dict.fromkeys(["rm", "rmdir", "unlink", "shred", "wipefs"], "deletes files."),
    **dict.fromkeys(["dd", "truncate", "fallocate"], "overwrites or resizes data in place."),
    **dict.fromkeys(
        ["mkfs", "mkfs.ext4", "mkfs.xfs", "mkfs.vfat", "fdisk", "parted", "mkswap"],
        "formats disks.",
    ),
}

_TEST_REASON = "runs tests, which may write coverage, caches or snapshots."


def _version_or_help(args: Sequence[str]) -> bool:
    return len(args) == 1 and args[0] in {"--version", "-V", "--help", "-h", "version"}


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
                if _dangerous_variable(arg.split("=", 1)[0]):
                    return _unknown(
                        text,
                        f"setting {arg.split('=', 1)[0]} can run code.",
                        "env.dangerous_variable",
                    )
                i += 1
                continue
            if program == "env" and (arg.startswith("-S") or arg.startswith("--split-string")):
                return _unknown(
                    text,
                    "`env -S` runs a command line the classifier does not parse.",
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
                return _result(IDEMPOTENT, text, f"`{program}` alone only prints.", program)
            return _unknown(text, f"`{program}` without a command is not understood.")
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
        return _result(IDEMPOTENT, text, "`xargs` alone only echoes its input.", "xargs")
    return classify_argv(rest, depth=depth, text=text)


def _shell(program: str, args: list[str], text: str, depth: int) -> Classification:
    flags = _short_flags(args)
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
    return _unknown(text, f"`{program}` runs a script the classifier cannot see.")


def _eval(program: str, args: list[str], text: str, depth: int) -> Classification:
    return _classify_source(" ".join(args), depth=depth + 1)


def _command_builtin(program: str, args: list[str], text: str, depth: int) -> Classification:
    if _short_flags(args) & {"v", "V"}:
        return _result(IDEMPOTENT, text, "looks a command up.", "command_lookup")
    rest = [a for a in args if a != "-p"]
    if not rest:
        return _unknown(text, "`command` without a command is not understood.")
    return classify_argv(rest, depth=depth, text=text)


def _find(program: str, args: list[str], text: str, depth: int) -> Classification:
    parts: list[Classification] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-delete":
            parts.append(
                _result(
                    NON_IDEMPOTENT, text, "deletes what it finds.", "find.delete", destructive=True
                )
            )
        elif arg in {"-exec", "-execdir", "-ok", "-okdir"}:
            end = i + 1
            while end < len(args) and args[end] not in {";", "+"}:
                end += 1
            inner = args[i + 1 : end]
            if not inner:
                parts.append(_unknown(text, "`find -exec` without a command."))
            else:
                parts.append(classify_argv(inner, depth=depth, text=text))
            i = end
        elif arg in {"-fprint", "-fprint0", "-fprintf", "-fls"}:
            parts.append(_result(CONDITIONAL, text, "writes its results to a file.", "find.write"))
        i += 1
    if not parts:
        return _result(IDEMPOTENT, text, "`find` without actions only lists.", "find")
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
    if "i" in _short_flags(args) or _has_long(args, "--in-place"):
        return _result(NON_IDEMPOTENT, text, "edits files in place.", "sed.in_place")
    if "f" in _short_flags(args) or _has_long(args, "--file"):
        return _unknown(text, "runs a sed script from a file the classifier cannot see.")
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
        positionals = _positionals(args)
        if not positionals:
            return _unknown(text, "`sed` without a script is not understood.")
        scripts = positionals[:1]
    if all(_sed_script_is_read_only(script) for script in scripts):
        return _result(IDEMPOTENT, text, "prints edited text without writing files.", "sed")
    return _unknown(text, "the sed script may write files or run commands (w, W, e).", "sed")


def _awk(program: str, args: list[str], text: str, depth: int) -> Classification:
    if "f" in _short_flags(args) or "i" in _short_flags(args):
        return _unknown(text, "runs an awk program from a file or in place.")
    positionals = _positionals([a for a in args if not a.startswith("-v")])
    script = positionals[0] if positionals else ""
    if script and not re.search(r"[>|]|system|getline|fflush|close", script):
        return _result(IDEMPOTENT, text, "an awk program that only prints.", "awk")
    return _unknown(text, "the awk program may write files or run commands.", "awk")


def _sort(program: str, args: list[str], text: str, depth: int) -> Classification:
    if _has_long(args, "--compress-program"):
        return _unknown(text, "`sort --compress-program` runs another program.", "sort.program")
    if "o" in _short_flags(args) or _has_long(args, "--output"):
        return _result(CONDITIONAL, text, "writes its output to a file.", "sort.output")
    return _result(IDEMPOTENT, text, "a read-only command.", "read_only.sort")


def _uniq(program: str, args: list[str], text: str, depth: int) -> Classification:
    if len(_positionals(args)) >= 2:
        return _result(CONDITIONAL, text, "writes its output to a file.", "uniq.output")
    return _result(IDEMPOTENT, text, "a read-only command.", "read_only.uniq")


def _rg(program: str, args: list[str], text: str, depth: int) -> Classification:
    if _has_long(args, "--pre", "--pre-glob"):
        return _unknown(text, "`rg --pre` runs a preprocessor program.", "rg.pre")
    return _result(IDEMPOTENT, text, "a read-only command.", "read_only.rg")


def _tee(program: str, args: list[str], text: str, depth: int) -> Classification:
    files = [f for f in _positionals(args) if f not in _HARMLESS_TARGETS]
    if not files:
        return _result(IDEMPOTENT, text, "copies its input to standard output.", "tee")
    if "a" in _short_flags(args) or _has_long(args, "--append"):
        return _result(NON_IDEMPOTENT, text, "appends to files.", "tee.append")
    return _result(CONDITIONAL, text, "overwrites files.", "tee")


def _read_only_unless(
    name: str, flag: str, long_flag: str, effect: str, rule: str
) -> ArgvClassifier:
    """A read-only command that ``-flag`` or ``long_flag`` turns into a side effect."""

    def classify(program: str, args: list[str], text: str, depth: int) -> Classification:
        if flag in _short_flags(args) or _has_long(args, long_flag):
            return _result(NON_IDEMPOTENT, text, effect, rule)
        return _result(IDEMPOTENT, text, "a read-only command.", f"read_only.{name}")

    return classify


def _hostname(program: str, args: list[str], text: str, depth: int) -> Classification:
    if _positionals(args):
        return _result(NON_IDEMPOTENT, text, "sets the host name.", "hostname.set")
    return _result(IDEMPOTENT, text, "a read-only command.", "read_only.hostname")


# git ---------------------------------------------------------------------------------------
_GIT_GLOBAL_WITH_VALUE = {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path"}
_GIT_READ = frozenset(
    [
        "status",
        "log",
        "diff",
        "show",
        "blame",
        "rev-parse",
        "ls-files",
        "ls-tree",
        "cat-file",
        "describe",
        "shortlog",
        "grep",
        "rev-list",
        "merge-base",
        "name-rev",
        "whatchanged",
        "count-objects",
        "for-each-ref",
        "show-ref",
        "check-ignore",
        "version",
        "help",
        "cherry",
        "range-diff",
        "annotate",
        "ls-remote",
        "var",
        "check-attr",
        "show-branch",
    ]
)
_GIT_DESTRUCTIVE = {"clean", "rm", "filter-branch", "filter-repo"}
_GIT_WRITE = frozenset(
    [
        "add",
        "commit",
        "push",
        "pull",
        "merge",
        "rebase",
        "reset",
        "checkout",
        "switch",
        "restore",
        "stash",
        "cherry-pick",
        "revert",
        "am",
        "apply",
        "tag",
        "branch",
        "mv",
        "init",
        "clone",
        "gc",
        "prune",
        "update-ref",
        "config",
        "submodule",
        "worktree",
        "notes",
        "fetch",
        "remote",
        "bisect",
        "reflog",
        "update-index",
        "fast-import",
        "replace",
        "sparse-checkout",
        "lfs",
        "maintenance",
    ]
)


def _git_read_runs_a_program(sub: str, args: list[str]) -> bool:
    """A reading git command told to run another program: an external diff, a pager, the
    repository's text conversion or filter programs, a browser, a remote upload-pack."""
    if _has_long(args, "--ext-diff", "--open-files-in-pager", "--textconv", "--filters"):
        return True
    if sub == "grep" and any(a.startswith("-O") for a in args):
        return True
    if sub == "ls-remote" and (_has_long(args, "--upload-pack") or "u" in _short_flags(args)):
        return True
    return sub == "help" and (_has_long(args, "--web") or "w" in _short_flags(args))


def _git_read_variant(sub: str, args: list[str]) -> bool:
    flags = _short_flags(args)
    positionals = _positionals(args)
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
    flags = _short_flags(args)
    if sub in _GIT_DESTRUCTIVE:
        return True
    if sub == "reset":
        return "--hard" in args or "--merge" in args or "--keep" in args
    if sub == "push":
        return (
            "f" in flags
            or _has_long(args, "--force", "--force-with-lease", "--delete", "--mirror", "--prune")
            or any(a.startswith("+") or a.startswith(":") for a in _positionals(args))
        )
    if sub == "branch":
        return "D" in flags or ("--delete" in args and "--force" in args)
    if sub == "checkout":
        return "--" in args or "f" in flags or _has_long(args, "--force")
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
            return _result(IDEMPOTENT, text, "prints git's version or help.", "git.version")
        if args[i] in {"-c", "--config-env"} or args[i].startswith(
            ("--config-env=", "--exec-path")
        ):
            return _unknown(
                text,
                "git configuration on the command line can run any program "
                "(core.fsmonitor, diff.external, ...).",
                "git.config_override",
            )
        i += 2 if args[i] in _GIT_GLOBAL_WITH_VALUE else 1
    if i >= len(args):
        return _result(IDEMPOTENT, text, "prints git's usage.", "git")
    sub, rest = args[i], args[i + 1 :]
    if sub in _GIT_READ:
        if _git_read_runs_a_program(sub, rest):
            return _unknown(text, "runs an external program.", "git.external")
        if _has_long(rest, "--output"):
            return _result(CONDITIONAL, text, "writes its output to a file.", "git.output")
        return _result(IDEMPOTENT, text, f"`git {sub}` only reads the repository.", f"git.{sub}")
    if sub in _GIT_WRITE or sub in _GIT_DESTRUCTIVE:
        if _git_read_variant(sub, rest):
            return _result(IDEMPOTENT, text, f"`git {sub}` only lists here.", f"git.{sub}.list")
        if _git_destructive(sub, rest):
            return _result(
                NON_IDEMPOTENT,
                text,
                f"`git {sub}` discards work or history.",
                f"git.{sub}",
                destructive=True,
            )
        if sub == "fetch":
            return _result(CONDITIONAL, text, "updates remote-tracking refs.", "git.fetch")
        return _result(
            NON_IDEMPOTENT, text, f"`git {sub}` changes the repository or a remote.", f"git.{sub}"
        )
    return _unknown(text, f"`git {sub}` is not a known git command.", "git.unknown")


# Package managers and test runners -----------------------------------------------------------
_NPM_READ = frozenset(
    [
        "ls",
        "list",
        "ll",
        "la",
        "view",
        "info",
        "show",
        "v",
        "outdated",
        "why",
        "explain",
        "root",
        "prefix",
        "bin",
        "search",
        "help",
        "whoami",
        "ping",
        "doctor",
        "fund",
        "config-get",
        "query",
    ]
)
_NPM_TEST = frozenset({"test", "t", "tst"})
_NPM_DESTRUCTIVE = frozenset({"unpublish", "deprecate", "owner", "dist-tag", "access"})


def _npm(program: str, args: list[str], text: str, depth: int) -> Classification:
    if not args or _version_or_help(args) or args[0] in {"-v", "--version"}:
        return _result(IDEMPOTENT, text, "prints version or usage.", f"{program}.version")
    sub, rest = args[0], args[1:]
    if sub in _NPM_TEST or (sub in {"run", "run-script"} and rest[:1] == ["test"]):
        return _result(CONDITIONAL, text, _TEST_REASON, f"{program}.test")
    if sub == "config" and rest[:1] in (["get"], ["list"], ["ls"]):
        return _result(IDEMPOTENT, text, "reads configuration.", f"{program}.config")
    if sub == "audit" and "fix" not in rest:
        return _result(IDEMPOTENT, text, "reports known vulnerabilities.", f"{program}.audit")
    if sub in _NPM_READ:
        return _result(IDEMPOTENT, text, f"`{program} {sub}` only reads.", f"{program}.{sub}")
    if sub == "publish":
        return _result(
            NON_IDEMPOTENT,
            text,
            "publishes a package; it cannot be repeated.",
            f"{program}.publish",
        )
    if sub in _NPM_DESTRUCTIVE:
        return _result(
            NON_IDEMPOTENT,
            text,
            "changes what the registry serves.",
            f"{program}.{sub}",
            destructive=True,
        )
    if sub in {"run", "run-script", "exec", "x", "dlx", "create", "init"}:
        return _unknown(text, "runs a script the classifier cannot see.", f"{program}.run")
    return _result(NON_IDEMPOTENT, text, "installs or changes packages.", f"{program}.{sub}")


def _yarn(program: str, args: list[str], text: str, depth: int) -> Classification:
    if not args:
        return _result(NON_IDEMPOTENT, text, "`yarn` alone installs packages.", "yarn.install")
    return _npm(program, args, text, depth)


def _pip(program: str, args: list[str], text: str, depth: int) -> Classification:
    if not args or _version_or_help(args):
        return _result(IDEMPOTENT, text, "prints version or usage.", "pip.version")
    if args[0] in {"list", "show", "freeze", "check", "help", "search", "index", "inspect"}:
        return _result(IDEMPOTENT, text, f"`pip {args[0]}` only reads.", f"pip.{args[0]}")
    if args[0] == "uninstall":
        return _result(NON_IDEMPOTENT, text, "removes packages.", "pip.uninstall", destructive=True)
    return _result(NON_IDEMPOTENT, text, "installs or changes packages.", f"pip.{args[0]}")


_MIGRATION_PATTERNS = (
    ("prisma", "migrate"),
    ("manage.py", "migrate"),
    ("alembic", "upgrade"),
    ("alembic", "downgrade"),
    ("rails", "db:migrate"),
    ("rake", "db:migrate"),
    ("flyway", "migrate"),
    ("knex", "migrate:latest"),
    ("sequelize", "db:migrate"),
    ("liquibase", "update"),
    ("diesel", "migration"),
    ("goose", "up"),
    ("atlas", "migrate"),
    ("prisma", "db"),
)


def _is_migration(argv: Sequence[str]) -> bool:
    names = [a.rsplit("/", 1)[-1] for a in argv]
    return any(tool in names and verb in names for tool, verb in _MIGRATION_PATTERNS)


def _migration_tool(program: str, args: list[str], text: str, depth: int) -> Classification:
    if _is_migration([program, *args]):
        return _result(
            NON_IDEMPOTENT, text, "runs a schema migration.", "migration", destructive=True
        )
    if program == "prisma" and args[:1] in (["validate"], ["format"], ["--version"], ["-v"]):
        return _result(CONDITIONAL, text, "may rewrite the schema file.", "prisma")
    return _unknown(text, f"`{program}` may change a database.", "migration_tool")


def _python(program: str, args: list[str], text: str, depth: int) -> Classification:
    if _version_or_help(args):
        return _result(IDEMPOTENT, text, "prints version or usage.", "python.version")
    if _is_migration([program, *args]):
        return _result(
            NON_IDEMPOTENT, text, "runs a schema migration.", "migration", destructive=True
        )
    if args[:2] in (["-m", "pytest"], ["-m", "unittest"]):
        return _result(CONDITIONAL, text, _TEST_REASON, "python.test")
    if len(args) >= 2 and args[0] == "-m" and args[1] == "pip":
        return _pip("pip", args[2:], text, depth)
    if args[:2] == ["manage.py", "test"]:
        return _result(CONDITIONAL, text, _TEST_REASON, "python.test")
    return _unknown(text, "runs Python code the classifier cannot see.", "python")


def _test_runner(program: str, args: list[str], text: str, depth: int) -> Classification:
    return _result(CONDITIONAL, text, _TEST_REASON, f"test.{program}")


def _make(program: str, args: list[str], text: str, depth: int) -> Classification:
    targets = [a for a in _positionals(args) if "=" not in a]
    if targets and all(t in {"test", "check", "lint", "tests"} for t in targets):
        return _result(CONDITIONAL, text, _TEST_REASON, "make.test")
    return _unknown(text, "runs Makefile recipes the classifier cannot see.", "make")


def _cargo_go(program: str, args: list[str], text: str, depth: int) -> Classification:
    if _version_or_help(args):
        return _result(IDEMPOTENT, text, "prints version or usage.", f"{program}.version")
    sub = args[0] if args else ""
    if sub == "test":
        return _result(CONDITIONAL, text, _TEST_REASON, f"{program}.test")
    if sub in {"build", "check", "vet", "fmt", "clippy", "doc"}:
        return _result(
            CONDITIONAL, text, "builds or formats; writes artifacts.", f"{program}.{sub}"
        )
    if sub in {"tree", "metadata", "env", "list", "version"}:
        return _result(IDEMPOTENT, text, f"`{program} {sub}` only reads.", f"{program}.{sub}")
    return _result(NON_IDEMPOTENT, text, "installs, publishes or runs code.", f"{program}.{sub}")


def _container(program: str, args: list[str], text: str, depth: int) -> Classification:
    read = {
        "docker": {"ps", "images", "inspect", "logs", "version", "info", "stats", "top"},
        "podman": {"ps", "images", "inspect", "logs", "version", "info", "stats", "top"},
        "kubectl": {
            "get",
            "describe",
            "logs",
            "version",
            "explain",
            "top",
            "api-resources",
            "cluster-info",
            "diff",
        },
    }[program]
    sub = args[0] if args else ""
    if sub in read:
        return _result(IDEMPOTENT, text, f"`{program} {sub}` only reads.", f"{program}.{sub}")
    destructive = sub in {"rm", "rmi", "delete", "prune", "system", "volume", "kill", "drain"}
    return _result(
        NON_IDEMPOTENT,
        text,
        "changes containers or a cluster.",
        f"{program}.{sub}",
        destructive=destructive,
    )


def _terraform(program: str, args: list[str], text: str, depth: int) -> Classification:
    sub = args[0] if args else ""
    if sub in {"plan", "validate", "show", "output", "version", "providers", "graph", "fmt"}:
        return _result(
            CONDITIONAL if sub == "fmt" else IDEMPOTENT,
            text,
            f"`terraform {sub}` does not change infrastructure.",
            f"terraform.{sub}",
        )
    return _result(
        NON_IDEMPOTENT,
        text,
        "changes infrastructure.",
        f"terraform.{sub}",
        destructive=sub in {"destroy", "apply", "import", "state", "taint"},
    )


_PROGRAMS: dict[str, ArgvClassifier] = {
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
    "sh": _shell,
    "bash": _shell,
    "zsh": _shell,
    "dash": _shell,
    "ksh": _shell,
    "eval": _eval,
    "command": _command_builtin,
    "builtin": _command_builtin,
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
    "date": _read_only_unless("date", "s", "--set", "sets the system clock.", "date.set"),
    "hostname": _hostname,
    "yq": _read_only_unless("yq", "i", "--inplace", "edits files in place.", "yq.in_place"),
    "git": _git,
    "npm": _npm,
    "pnpm": _npm,
    "yarn": _yarn,
    "pip": _pip,
    "pip3": _pip,
    "python": _python,
    "python3": _python,
    "pytest": _test_runner,
    "py.test": _test_runner,
    "jest": _test_runner,
    "vitest": _test_runner,
    "mocha": _test_runner,
    "tox": _test_runner,
    "make": _make,
    "cargo": _cargo_go,
    "go": _cargo_go,
    "docker": _container,
    "podman": _container,
    "kubectl": _container,
    "terraform": _terraform,
    "prisma": _migration_tool,
    "alembic": _migration_tool,
    "rails": _migration_tool,
    "rake": _migration_tool,
    "flyway": _migration_tool,
    "knex": _migration_tool,
    "sequelize": _migration_tool,
    "liquibase": _migration_tool,
    "goose": _migration_tool,
    "atlas": _migration_tool,
    "diesel": _migration_tool,
}
