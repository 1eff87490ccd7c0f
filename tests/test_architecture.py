"""Imports point one way (docs/architecture.md): console on reconcile on ledger, no cycle inside
an app, and the client, the sandbox, the drills and the benchmark apart. The contracts are
import-linter's, in pyproject.toml; imports inside functions count. And every module, function
and file docs/architecture.md names exists, so the page follows the code when it moves."""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APPS = ("ledger", "reconcile", "console")


def _lint_imports(config: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(Path(sys.executable).with_name("lint-imports")),
            "--config",
            str(config),
            "--no-cache",
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_imports_keep_every_contract() -> None:
    checked = _lint_imports(ROOT / "pyproject.toml", ROOT)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _apps_only_config(tmp_path: Path) -> Path:
    """The contracts of pyproject.toml that name only the three apps, for a copy of them."""
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contracts = [
        c
        for c in settings["contracts"]
        if set(c.get("layers", c.get("ancestors", []))) == set(APPS)
    ]
    assert {c["type"] for c in contracts} == {"layers", "acyclic_siblings"}
    indent = "\n    "
    lines = ["[importlinter]", "root_packages =" + indent + indent.join(APPS)]
    for number, contract in enumerate(contracts):
        lines.append(f"[importlinter:contract:{number}]")
        lines.append(f"name = {contract['name']}")
        lines.append(f"type = {contract['type']}")
        key = "layers" if contract["type"] == "layers" else "ancestors"
        lines.append(f"{key} =" + indent + indent.join(contract[key]))
    config = tmp_path / "contracts.ini"
    config.write_text("\n".join(lines) + "\n")
    return config


@pytest.mark.parametrize(
    ("module", "planted", "broken"),
    [
        ("ledger/services/audit.py", "from console.models import Preferences", "layered"),
        ("ledger/domain.py", "import reconcile.models", "layered"),
        ("reconcile/services.py", "from reconcile.tasks import send_lookups", "cycle"),
    ],
)
def test_an_upward_import_or_a_cycle_breaks_a_contract(
    tmp_path: Path, module: str, planted: str, broken: str
) -> None:
    for app in APPS:
        shutil.copytree(ROOT / app, tmp_path / app, ignore=shutil.ignore_patterns("__pycache__"))
    config = _apps_only_config(tmp_path)
    assert _lint_imports(config, tmp_path).returncode == 0
    with (tmp_path / module).open("a") as source:
        source.write(f"\n\ndef _planted() -> None:\n    {planted}  # noqa\n")
    checked = _lint_imports(config, tmp_path)
    assert checked.returncode == 1
    assert broken in checked.stdout.split("Broken contracts", 1)[1]


PREFIXES = ("", "ledger.", "ledger.services.", "ledger.classification.", "ledger.models.")
PREFIXES += ("reconcile.", "console.")


def _resolves(dotted: str) -> bool:
    """Whether ``dotted`` names a module, or something in one, under one of ``PREFIXES`` (the
    page names ``records.reserve_key`` for ``ledger.records.reserve_key``)."""
    for prefix in PREFIXES:
        parts = (prefix + dotted).split(".")
        for cut in range(len(parts), 0, -1):
            try:
                found: object = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            try:
                for name in parts[cut:]:
                    found = getattr(found, name)
            except AttributeError:
                break
            return True
    return False


def test_every_module_function_and_file_docs_architecture_names_exists() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text()
    missing = []
    for quoted in re.findall(r"`([^`\s]+)`", page):
        name = quoted.split("(", 1)[0]
        if name.startswith("/"):
            continue  # a URL
        if "/" in name or name.endswith((".py", ".toml")):
            if not (ROOT / name).exists() and not any(
                p for p in ROOT.glob(f"*/**/{name}") if ".venv" not in p.parts
            ):
                missing.append(quoted)
        elif "." in name and re.fullmatch(r"[A-Za-z_][\w.]*", name) and not _resolves(name):
            missing.append(quoted)
    assert missing == []
    assert not _resolves("records.reserve_no_key") and _resolves("records.reserve_key")


# The module that builds SQL from the models' metadata.
WRITES_SQL_FROM_METADATA = {"ledger/sql/statements.py"}
_SQL = re.compile(r"\b(SELECT|UPDATE|DELETE FROM|INSERT INTO|JOIN|WHERE|RETURNING)\b")
_QUALIFIED = re.compile(r"(?<![\w.])[a-z]{1,2}\.([a-z_][a-z0-9_]*)\b")
_DEFINED = re.compile(r"\bAS\s+([a-z_][a-z0-9_]*)\b", re.IGNORECASE)


def _literal_columns(source: str) -> list[tuple[int, str]]:
    """Columns named literally (``alias.column``) in the SQL text of ``source``'s strings, the
    holes of an f-string left out; a name the statement defines itself (``AS name``) is not a
    column."""
    tree = ast.parse(source)
    pieces = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    found = set()
    for node in ast.walk(tree):
        if id(node) in pieces:
            continue  # read with its f-string
        if isinstance(node, ast.JoinedStr):
            parts = [v.value if isinstance(v, ast.Constant) else "{}" for v in node.values]
            text = "".join(str(part) for part in parts)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        else:
            continue
        if _SQL.search(text):
            defined = set(_DEFINED.findall(text))
            found |= {(node.lineno, c) for c in _QUALIFIED.findall(text) if c not in defined}
    return sorted(found)


def test_hand_written_sql_takes_its_column_names_from_the_models() -> None:
    assert _literal_columns('f"SELECT {x} FROM {t} r WHERE r.tenant_id = %s"') == [(1, "tenant_id")]
    assert _literal_columns('f"SELECT e.id AS entry_id FROM {t} e) r ON r.entry_id"') == [(1, "id")]
    literal = {}
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            if "migrations" in path.parts or name in WRITES_SQL_FROM_METADATA:
                continue
            if found := _literal_columns(path.read_text()):
                literal[name] = found
    assert literal == {}


def test_the_lower_apps_name_no_console_url() -> None:
    """The ledger and the reconciler link to the console only through what the console gives
    them (``LEDGER_NOTIFICATION_LINKS``): a URL name of the console's in them would be an
    upward dependency that no import shows."""
    named = [
        f"{path.relative_to(ROOT)}:{number}"
        for app in ("ledger", "reconcile")
        for path in (ROOT / app).rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"""["']console:""", line)
    ]
    assert named == []


def _assigned_elsewhere(tree: ast.Module, modules: set[str]) -> list[int]:
    """Lines that rebind a module-level name of another module (``files._roots = f``), or
    declare a ``global``: state one module sets in another, which no import shows."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            lines.append(node.lineno)
        targets = node.targets if isinstance(node, ast.Assign) else []
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id in modules
            ):
                lines.append(node.lineno)
    return lines


def test_no_module_writes_another_modules_globals() -> None:
    """What an app above gives the ledger comes through a setting that names a function
    (``LEDGER_LOOKUP_CHECK``, ``LEDGER_NOTIFICATION_LINKS``) or an argument (the workspace
    roots the classifier is handed), never through a global set at start-up."""
    written = []
    for app in ("ledger", "reconcile", "console"):
        for path in (ROOT / app).rglob("*.py"):
            tree = ast.parse(path.read_text())
            modules = {
                (alias.asname or alias.name).split(".")[0]
                for node in ast.walk(tree)
                if isinstance(node, ast.Import | ast.ImportFrom)
                for alias in node.names
            }
            written += [f"{path.relative_to(ROOT)}:{n}" for n in _assigned_elsewhere(tree, modules)]
    assert written == []


def test_no_apps_start_up_hands_another_app_a_router_or_a_function() -> None:
    """A ``ready`` method connects signals and sets up its own app; it mounts no router
    (``console.api`` mounts them all) and registers no function in a module of the ledger."""
    wired = [
        f"{path.relative_to(ROOT)}: {ast.unparse(node.func)}"
        for path in ROOT.glob("*/apps.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and re.search(r"register|add_router", ast.unparse(node.func))
    ]
    assert wired == []
