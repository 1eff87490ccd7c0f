"""Language toolchains: package managers (npm, pnpm, yarn, pip), Python, test runners,
``make``, ``cargo`` and ``go``, and schema migration tools. Running tests asks; a migration is
destructive; a script the classifier cannot see is not understood.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.classification import Classification
from ledger.classification.shell.argv import ArgvClassifier, operands, version_or_help
from ledger.classification.shell.programs import (
    CONDITIONAL,
    IDEMPOTENT,
    NON_IDEMPOTENT,
    result,
    unknown,
)
from ledger.classification.shell.tables import (
    MIGRATION_PATTERNS,
    NPM_DESTRUCTIVE,
    NPM_READ,
    NPM_TEST,
)

_TEST_REASON = "runs tests, which may write coverage, caches or snapshots."


def _npm(program: str, args: list[str], text: str, depth: int) -> Classification:
    if not args or version_or_help(args) or args[0] in {"-v", "--version"}:
        return result(IDEMPOTENT, text, "prints version or usage.", f"{program}.version")
    sub, rest = args[0], args[1:]
    if sub in NPM_TEST or (sub in {"run", "run-script"} and rest[:1] == ["test"]):
        return result(CONDITIONAL, text, _TEST_REASON, f"{program}.test")
    if sub == "config" and rest[:1] in (["get"], ["list"], ["ls"]):
        return result(IDEMPOTENT, text, "reads configuration.", f"{program}.config")
    if sub == "audit" and "fix" not in rest:
        return result(IDEMPOTENT, text, "reports known vulnerabilities.", f"{program}.audit")
    if sub in NPM_READ:
        return result(IDEMPOTENT, text, f"`{program} {sub}` only reads.", f"{program}.{sub}")
    if sub == "publish":
        return result(
            NON_IDEMPOTENT,
            text,
            "publishes a package; it cannot be repeated.",
            f"{program}.publish",
        )
    if sub in NPM_DESTRUCTIVE:
        return result(
            NON_IDEMPOTENT,
            text,
            "changes what the registry serves.",
            f"{program}.{sub}",
            destructive=True,
        )
    if sub in {"run", "run-script", "exec", "x", "dlx", "create", "init"}:
        return unknown(text, "runs a script the classifier cannot see.", f"{program}.run")
    return result(NON_IDEMPOTENT, text, "installs or changes packages.", f"{program}.{sub}")


def _yarn(program: str, args: list[str], text: str, depth: int) -> Classification:
    if not args:
        return result(NON_IDEMPOTENT, text, "`yarn` alone installs packages.", "yarn.install")
    return _npm(program, args, text, depth)


def _pip(program: str, args: list[str], text: str, depth: int) -> Classification:
    if not args or version_or_help(args):
        return result(IDEMPOTENT, text, "prints version or usage.", "pip.version")
    if args[0] in {"list", "show", "freeze", "check", "help", "search", "index", "inspect"}:
        return result(IDEMPOTENT, text, f"`pip {args[0]}` only reads.", f"pip.{args[0]}")
    if args[0] == "uninstall":
        return result(NON_IDEMPOTENT, text, "removes packages.", "pip.uninstall", destructive=True)
    return result(NON_IDEMPOTENT, text, "installs or changes packages.", f"pip.{args[0]}")


def _is_migration(argv: Sequence[str]) -> bool:
    names = [a.rsplit("/", 1)[-1] for a in argv]
    return any(tool in names and verb in names for tool, verb in MIGRATION_PATTERNS)


def _migration_tool(program: str, args: list[str], text: str, depth: int) -> Classification:
    if _is_migration([program, *args]):
        return result(
            NON_IDEMPOTENT, text, "runs a schema migration.", "migration", destructive=True
        )
    if program == "prisma" and args[:1] in (["validate"], ["format"], ["--version"], ["-v"]):
        return result(CONDITIONAL, text, "may rewrite the schema file.", "prisma")
    return unknown(text, f"`{program}` may change a database.", "migration_tool")


def _python(program: str, args: list[str], text: str, depth: int) -> Classification:
    if version_or_help(args):
        return result(IDEMPOTENT, text, "prints version or usage.", "python.version")
    if _is_migration([program, *args]):
        return result(
            NON_IDEMPOTENT, text, "runs a schema migration.", "migration", destructive=True
        )
    if args[:2] in (["-m", "pytest"], ["-m", "unittest"]):
        return result(CONDITIONAL, text, _TEST_REASON, "python.test")
    if len(args) >= 2 and args[0] == "-m" and args[1] == "pip":
        return _pip("pip", args[2:], text, depth)
    if args[:2] == ["manage.py", "test"]:
        return result(CONDITIONAL, text, _TEST_REASON, "python.test")
    return unknown(text, "runs Python code the classifier cannot see.", "python")


def _test_runner(program: str, args: list[str], text: str, depth: int) -> Classification:
    return result(CONDITIONAL, text, _TEST_REASON, f"test.{program}")


def _make(program: str, args: list[str], text: str, depth: int) -> Classification:
    targets = [a for a in operands(args) if "=" not in a]
    if targets and all(t in {"test", "check", "lint", "tests"} for t in targets):
        return result(CONDITIONAL, text, _TEST_REASON, "make.test")
    return unknown(text, "runs Makefile recipes the classifier cannot see.", "make")


def _cargo_go(program: str, args: list[str], text: str, depth: int) -> Classification:
    if version_or_help(args):
        return result(IDEMPOTENT, text, "prints version or usage.", f"{program}.version")
    sub = args[0] if args else ""
    if sub == "test":
        return result(CONDITIONAL, text, _TEST_REASON, f"{program}.test")
    if sub in {"build", "check", "vet", "fmt", "clippy", "doc"}:
        return result(CONDITIONAL, text, "builds or formats; writes artifacts.", f"{program}.{sub}")
    if sub in {"tree", "metadata", "env", "list", "version"}:
        return result(IDEMPOTENT, text, f"`{program} {sub}` only reads.", f"{program}.{sub}")
    return result(NON_IDEMPOTENT, text, "installs, publishes or runs code.", f"{program}.{sub}")


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
