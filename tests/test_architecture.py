"""Imports point one way (docs/architecture.md): console on reconcile on ledger, no cycle inside
an app, and the client, the sandbox, the drills and the benchmark apart. The contracts are
import-linter's, in pyproject.toml; imports inside functions count. And every module, function
and file docs/architecture.md names exists, so the page follows the code when it moves."""

from __future__ import annotations

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
        ("ledger/services/audit.py", "from console.models import Membership", "layered"),
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
    page names ``records.reserve_key`` for ``ledger.services.records.reserve_key``)."""
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
