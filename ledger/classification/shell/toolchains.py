"""Language toolchains: package managers (npm, pnpm, yarn, pip), Python, test runners,
``make``, ``cargo`` and ``go``, and schema migration tools. Running tests asks; a migration is
destructive; a script the classifier cannot see is not understood.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.utils.translation import gettext_noop

from ledger.classification import Classification
from ledger.classification.shell.argv import ArgvClassifier, operands, version_or_help
from ledger.classification.shell.programs import (
    CONDITIONAL,
    IDEMPOTENT,
    NON_IDEMPOTENT,
    ONLY_READS,
    result,
    unknown,
)
from ledger.classification.shell.tables import (
    MIGRATION_PATTERNS,
    NPM_DESTRUCTIVE,
    NPM_READ,
    NPM_TEST,
)
from ledger.stored_text import StoredText

_TESTS = StoredText(gettext_noop("runs tests, which may write coverage, caches or snapshots."))
_VERSION = StoredText(gettext_noop("prints version or usage."))
_READS_CONFIG = StoredText(gettext_noop("reads configuration."))
_AUDIT = StoredText(gettext_noop("reports known vulnerabilities."))
_PUBLISH = StoredText(gettext_noop("publishes a package; it cannot be repeated."))
_REGISTRY = StoredText(gettext_noop("changes what the registry serves."))
_HIDDEN_SCRIPT = StoredText(gettext_noop("runs a script the classifier cannot see."))
_INSTALLS = StoredText(gettext_noop("installs or changes packages."))
_YARN_ALONE = StoredText(gettext_noop("`yarn` alone installs packages."))
_REMOVES = StoredText(gettext_noop("removes packages."))
_MIGRATION = StoredText(gettext_noop("runs a schema migration."))
_PRISMA_SCHEMA = StoredText(gettext_noop("may rewrite the schema file."))
_MAY_CHANGE_DATABASE = StoredText(gettext_noop("`%(program)s` may change a database."))
_HIDDEN_PYTHON = StoredText(gettext_noop("runs Python code the classifier cannot see."))
_HIDDEN_RECIPES = StoredText(gettext_noop("runs Makefile recipes the classifier cannot see."))
_BUILDS = StoredText(gettext_noop("builds or formats; writes artifacts."))
_RUNS_CODE = StoredText(gettext_noop("installs, publishes or runs code."))


def _npm(program: str, args: list[str], text: str, depth: int) -> Classification:
    if not args or version_or_help(args) or args[0] in {"-v", "--version"}:
        return result(IDEMPOTENT, text, _VERSION(), f"{program}.version")
    sub, rest = args[0], args[1:]
    if sub in NPM_TEST or (sub in {"run", "run-script"} and rest[:1] == ["test"]):
        return result(CONDITIONAL, text, _TESTS(), f"{program}.test")
    if sub == "config" and rest[:1] in (["get"], ["list"], ["ls"]):
        return result(IDEMPOTENT, text, _READS_CONFIG(), f"{program}.config")
    if sub == "audit" and "fix" not in rest:
        return result(IDEMPOTENT, text, _AUDIT(), f"{program}.audit")
    if sub in NPM_READ:
        return result(IDEMPOTENT, text, ONLY_READS(program=program, sub=sub), f"{program}.{sub}")
    if sub == "publish":
        return result(
            NON_IDEMPOTENT,
            text,
            _PUBLISH(),
            f"{program}.publish",
        )
    if sub in NPM_DESTRUCTIVE:
        return result(
            NON_IDEMPOTENT,
            text,
            _REGISTRY(),
            f"{program}.{sub}",
            destructive=True,
        )
    if sub in {"run", "run-script", "exec", "x", "dlx", "create", "init"}:
        return unknown(text, _HIDDEN_SCRIPT(), f"{program}.run")
    return result(NON_IDEMPOTENT, text, _INSTALLS(), f"{program}.{sub}")


def _yarn(program: str, args: list[str], text: str, depth: int) -> Classification:
    if not args:
        return result(NON_IDEMPOTENT, text, _YARN_ALONE(), "yarn.install")
    return _npm(program, args, text, depth)


def _pip(program: str, args: list[str], text: str, depth: int) -> Classification:
    if not args or version_or_help(args):
        return result(IDEMPOTENT, text, _VERSION(), "pip.version")
    if args[0] in {"list", "show", "freeze", "check", "help", "search", "index", "inspect"}:
        return result(IDEMPOTENT, text, ONLY_READS(program="pip", sub=args[0]), f"pip.{args[0]}")
    if args[0] == "uninstall":
        return result(NON_IDEMPOTENT, text, _REMOVES(), "pip.uninstall", destructive=True)
    return result(NON_IDEMPOTENT, text, _INSTALLS(), f"pip.{args[0]}")


def _is_migration(argv: Sequence[str]) -> bool:
    names = [a.rsplit("/", 1)[-1] for a in argv]
    return any(tool in names and verb in names for tool, verb in MIGRATION_PATTERNS)


def _migration_tool(program: str, args: list[str], text: str, depth: int) -> Classification:
    if _is_migration([program, *args]):
        return result(NON_IDEMPOTENT, text, _MIGRATION(), "migration", destructive=True)
    if program == "prisma" and args[:1] in (["validate"], ["format"], ["--version"], ["-v"]):
        return result(CONDITIONAL, text, _PRISMA_SCHEMA(), "prisma")
    return unknown(text, _MAY_CHANGE_DATABASE(program=program), "migration_tool")


def _python(program: str, args: list[str], text: str, depth: int) -> Classification:
    if version_or_help(args):
        return result(IDEMPOTENT, text, _VERSION(), "python.version")
    if _is_migration([program, *args]):
        return result(NON_IDEMPOTENT, text, _MIGRATION(), "migration", destructive=True)
    if args[:2] in (["-m", "pytest"], ["-m", "unittest"]):
        return result(CONDITIONAL, text, _TESTS(), "python.test")
    if len(args) >= 2 and args[0] == "-m" and args[1] == "pip":
        return _pip("pip", args[2:], text, depth)
    if args[:2] == ["manage.py", "test"]:
        return result(CONDITIONAL, text, _TESTS(), "python.test")
    return unknown(text, _HIDDEN_PYTHON(), "python")


def _test_runner(program: str, args: list[str], text: str, depth: int) -> Classification:
    return result(CONDITIONAL, text, _TESTS(), f"test.{program}")


def _make(program: str, args: list[str], text: str, depth: int) -> Classification:
    targets = [a for a in operands(args) if "=" not in a]
    if targets and all(t in {"test", "check", "lint", "tests"} for t in targets):
        return result(CONDITIONAL, text, _TESTS(), "make.test")
    return unknown(text, _HIDDEN_RECIPES(), "make")


def _cargo_go(program: str, args: list[str], text: str, depth: int) -> Classification:
    if version_or_help(args):
        return result(IDEMPOTENT, text, _VERSION(), f"{program}.version")
    sub = args[0] if args else ""
    if sub == "test":
        return result(CONDITIONAL, text, _TESTS(), f"{program}.test")
    if sub in {"build", "check", "vet", "fmt", "clippy", "doc"}:
        return result(CONDITIONAL, text, _BUILDS(), f"{program}.{sub}")
    if sub in {"tree", "metadata", "env", "list", "version"}:
        return result(IDEMPOTENT, text, ONLY_READS(program=program, sub=sub), f"{program}.{sub}")
    return result(NON_IDEMPOTENT, text, _RUNS_CODE(), f"{program}.{sub}")


PROGRAMS: dict[str, ArgvClassifier] = {
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
