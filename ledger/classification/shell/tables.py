"""The shell classifier's allow-lists and deny-lists: which programs only read, which write or
destroy, which options of a read-only program act, and the subcommands of git and npm. Only data:
the classifiers that read these tables are in the modules beside this one."""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.utils.translation import gettext_noop

from ledger.stored_text import StoredText

# Files that a redirection or ``tee`` writes to without effect.
HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
# A program run by a path in one of these directories is classified by its name.
TRUSTED_BIN_DIRS = ("/bin/", "/usr/bin/", "/usr/local/bin/", "/sbin/", "/usr/sbin/")

# Words that name a destructive action, looked for in text that is not understood.
DESTRUCTIVE_WORDS = frozenset(
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

# Variables through which a program can be made to run another program.
DANGEROUS_VARIABLE = re.compile(
    r"^(LD_\w+|DYLD_\w+|\w*PAGER|\w*EDITOR|VISUAL|BASH_ENV|ENV|SHELLOPTS|PROMPT_COMMAND|IFS|"
    r"PATH|GIT_\w+|LESSOPEN|LESSCLOSE|PYTHON\w*|NODE_OPTIONS|PERL5\w*|RUBYOPT|\w+_COMMAND)$"
)

# Programs that only read, unless one of their ``ACTING_OPTIONS`` is given.
READ_ONLY = frozenset(
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


NO_ACTING_OPTIONS = ActingOptions()

# Every program of ``READ_ONLY`` has its entry (a test holds the two together), so trusting a
# new program means saying which of its options act.
ACTING_OPTIONS: dict[str, ActingOptions] = {
    **dict.fromkeys(READ_ONLY, NO_ACTING_OPTIONS),
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

# Programs that write, or act on another host or the system, and why: never replayed.
_WRITES_FILES = StoredText(gettext_noop("writes files."))
_EDITOR = StoredText(gettext_noop("opens an editor."))
WRITES: dict[str, StoredText] = {
    **dict.fromkeys(
        ["cp", "mv", "ln", "install", "rsync"], StoredText(gettext_noop("copies or moves files."))
    ),
    **dict.fromkeys(
        ["mkdir", "touch", "mkfifo", "mknod"],
        StoredText(gettext_noop("creates files or directories.")),
    ),
    **dict.fromkeys(
        ["chmod", "chown", "chgrp", "setfacl", "chattr"],
        StoredText(gettext_noop("changes file metadata.")),
    ),
    **dict.fromkeys(
        ["curl", "wget", "ssh", "scp", "sftp", "ftp", "nc", "telnet"],
        StoredText(gettext_noop("talks to another host; the request may have side effects there.")),
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
        StoredText(gettext_noop("changes running processes or the system.")),
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
        StoredText(gettext_noop("installs or builds software.")),
    ),
    **dict.fromkeys(
        ["psql", "mysql", "sqlite3", "redis-cli", "mongo", "mongosh"],
        StoredText(gettext_noop("runs statements against a database.")),
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
        StoredText(gettext_noop("runs code the classifier cannot see.")),
    ),
    **dict.fromkeys(
        ["helm", "aws", "gcloud", "az", "gh", "hub", "glab"],
        StoredText(gettext_noop("changes remote infrastructure or services.")),
    ),
    "patch": StoredText(gettext_noop("changes files.")),
    "split": _WRITES_FILES,
    "csplit": _WRITES_FILES,
    "tar": StoredText(gettext_noop("may extract or create archives.")),
    "unzip": StoredText(gettext_noop("extracts files.")),
    "zip": StoredText(gettext_noop("creates archives.")),
    "gzip": StoredText(gettext_noop("replaces files with compressed ones.")),
    "gunzip": StoredText(gettext_noop("replaces files with decompressed ones.")),
    "vi": _EDITOR,
    "vim": _EDITOR,
    "nano": _EDITOR,
    "emacs": _EDITOR,
}

# Programs that destroy data, and why: never replayed, and flagged destructive.
DESTRUCTIVE: dict[str, StoredText] = {
    **dict.fromkeys(
        ["rm", "rmdir", "unlink", "shred", "wipefs"], StoredText(gettext_noop("deletes files."))
    ),
    **dict.fromkeys(
        ["dd", "truncate", "fallocate"],
        StoredText(gettext_noop("overwrites or resizes data in place.")),
    ),
    **dict.fromkeys(
        ["mkfs", "mkfs.ext4", "mkfs.xfs", "mkfs.vfat", "fdisk", "parted", "mkswap"],
        StoredText(gettext_noop("formats disks.")),
    ),
}

# git's global options that take a value; its subcommands that read, destroy and write.
GIT_GLOBAL_WITH_VALUE = {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path"}
GIT_READ = frozenset(
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
GIT_DESTRUCTIVE = {"clean", "rm", "filter-branch", "filter-repo"}
GIT_WRITE = frozenset(
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

# The subcommands of npm (pnpm, yarn) that only read, that run the tests, and that change
# what the registry serves.
NPM_READ = frozenset(
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
NPM_TEST = frozenset({"test", "t", "tst"})
NPM_DESTRUCTIVE = frozenset({"unpublish", "deprecate", "owner", "dist-tag", "access"})

# A schema migration tool and the word that makes it migrate, anywhere in the command.
MIGRATION_PATTERNS = (
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
