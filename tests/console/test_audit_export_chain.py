"""The audit log's CSV export carries each event's seal, and ``verify_audit --csv`` checks it
offline, with the walk that checks the database: a clean export passes, and an edited, a
deleted, a duplicated and a forged row are each named."""

from __future__ import annotations

import csv
import io
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.http import StreamingHttpResponse
from django.test import Client

from console import csv_export
from ledger.models import AuditEvent, Tenant
from ledger.services.audit import audit
from ledger.services.audit_sealing import seal_audit_events
from tests.console.conftest import make_user, signed_in

pytestmark = pytest.mark.django_db

#: Events whose text an export must give back exactly: formula starts, a leading apostrophe,
#: commas, quotes and line breaks, non-ASCII, a target id with a colon, JSON with floats.
AWKWARD: list[dict[str, object]] = [
    {"actor": "=HYPERLINK(1)", "detail": "plain"},
    {"actor": "'quoted", "detail": "'=both"},
    {"actor": "-minus", "detail": 'line one\nline "two", and\r\nthree'},
    {"actor": "Zoë 中文", "detail": "\ttab first", "target": ("page", "/audit/?a=b:c")},
    {"actor": "@at", "before": {"price": 1.5, "n": 2.0}, "after": {"deep": [1, {"x": None}]}},
    {"actor": "bob", "outcome": AuditEvent.Result.DENIED, "detail": "+1"},
]


def _write(tenant: Tenant, n: int, fields: dict[str, object]) -> None:
    audit(
        tenant=tenant,
        actor=str(fields["actor"]),
        action=f"test.{'even' if n % 2 == 0 else 'odd'}",
        target=fields.get("target", ("tenant", str(n))),  # type: ignore[arg-type]
        source="console",
        before=fields.get("before"),  # type: ignore[arg-type]
        after=fields.get("after"),  # type: ignore[arg-type]
        outcome=str(fields.get("outcome", AuditEvent.Result.SUCCESS)),
        detail=str(fields.get("detail", "")),
    )


@pytest.fixture
def manager(django_user_model, tenant: Tenant) -> Client:
    for n, fields in enumerate(AWKWARD):
        _write(tenant, n, fields)
    seal_audit_events()
    return signed_in(make_user(django_user_model, "auditor", tenant, "manager"))


def _export(client: Client, tmp_path: Path, **params: str) -> Path:
    response = client.get("/audit/", {**params, "format": "csv"}, secure=True)
    assert isinstance(response, StreamingHttpResponse)
    path = tmp_path / "acme-audit.csv"
    path.write_bytes(b"".join(response.streaming_content))
    return path


def _verify(path: Path, **options: object) -> str:
    out = io.StringIO()
    call_command("verify_audit", csv=str(path), stdout=out, **options)
    return out.getvalue()


def _broken(path: Path) -> str:
    out = io.StringIO()
    with pytest.raises(CommandError, match="broken"):
        call_command("verify_audit", csv=str(path), stdout=out)
    return out.getvalue()


def _rows(path: Path) -> tuple[list[str], list[list[str]]]:
    with path.open(newline="", encoding="utf-8") as lines:
        header, *rows = list(csv.reader(lines))
    return header, rows


def _rewrite(path: Path, change: Callable[[list[str], list[list[str]]], list[list[str]]]) -> None:
    header, rows = _rows(path)
    out = io.StringIO()
    csv.writer(out).writerows([header, *change(header, rows)])
    path.write_text(out.getvalue(), encoding="utf-8")


def test_the_export_carries_each_events_seal(manager: Client, tenant: Tenant, tmp_path) -> None:
    header, rows = _rows(_export(manager, tmp_path))
    assert header[-4:] == ["seq", "prev_digest", "digest", "changes_digest"]
    exported = {row[header.index("event_id")]: row for row in rows}
    for event in AuditEvent.objects.filter(tenant=tenant):
        row = exported[str(event.pk)]
        assert row[header.index("seq")] == str(event.seq)
        assert row[header.index("digest")] == event.digest


def test_an_export_verifies_offline(manager: Client, tenant: Tenant, tmp_path) -> None:
    head = AuditEvent.objects.filter(tenant=tenant).order_by("-seq").first()
    assert head is not None
    out = _verify(_export(manager, tmp_path))
    assert f"OK, {len(AWKWARD)} event(s), seq 1 to {len(AWKWARD)}, last digest {head.digest}" in (
        out
    )


def _seq(header: list[str], row: list[str]) -> int:
    return int(row[header.index("seq")])


def _edit_actor(header: list[str], rows: list[list[str]]) -> list[list[str]]:
    for row in rows:
        if _seq(header, row) == 3:
            row[header.index("actor")] = "mallory"
    return rows


def _forge(header: list[str], rows: list[list[str]]) -> list[list[str]]:
    forged = list(rows[0])
    forged[header.index("seq")] = str(len(rows) + 1)
    forged[header.index("event_id")] = "999999"
    forged[header.index("prev_digest")] = "c" * 64
    return [forged, *rows]


TAMPERED: dict[str, tuple[Callable[[list[str], list[list[str]]], list[list[str]]], str]] = {
    "edited": (_edit_actor, "edited at seq 3"),
    "deleted": (lambda h, rows: [r for r in rows if _seq(h, r) != 4], "missing at seq 4"),
    "duplicated": (
        lambda h, rows: [*rows, *(r for r in rows if _seq(h, r) == 2)],
        "duplicate at seq 2",
    ),
    "forged": (_forge, f"unlinked at seq {len(AWKWARD) + 1} (event 999999)"),
}


@pytest.mark.parametrize("tamper", TAMPERED)
def test_a_tampered_export_names_its_first_broken_link(manager: Client, tmp_path, tamper) -> None:
    path = _export(manager, tmp_path)
    change, found = TAMPERED[tamper]
    _rewrite(path, change)
    assert found in _broken(path)


def test_an_export_cut_at_its_limit_verifies_from_its_first_row(
    manager: Client, tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(csv_export, "MAX_EXPORT_ROWS", 4)
    path = _export(manager, tmp_path)
    out = _verify(path)
    first = len(AWKWARD) - 3
    assert f"OK, 4 event(s), seq {first} to {len(AWKWARD)}" in out
    assert "the export was cut at its row limit" in out
    assert f"seq {first}'s prev_digest taken as given" in out


def test_a_filtered_export_verifies_as_filtered(manager: Client, tmp_path) -> None:
    path = _export(manager, tmp_path, action="test.even")
    assert "missing at seq 2" in _broken(path)
    out = _verify(path, filtered=True)
    assert "OK, 3 event(s), seq 1 to 5" in out and "2 gap(s) in seq" in out


def test_rows_not_sealed_when_exported_are_counted_not_checked(
    manager: Client, tenant: Tenant, tmp_path
) -> None:
    _write(tenant, 99, {"actor": "late"})
    out = _verify(_export(manager, tmp_path))
    assert f"OK, {len(AWKWARD)} event(s)" in out
    assert "1 row(s) not sealed when exported, not checked" in out


def test_a_file_that_is_not_an_audit_export_is_refused(tmp_path) -> None:
    path = tmp_path / "calls.csv"
    path.write_text("call_id,tool\n1,create_order\n")
    with pytest.raises(CommandError, match="not an audit log export: no "):
        _verify(path)


def test_an_export_is_verified_alone(tmp_path) -> None:
    with pytest.raises(CommandError, match="--tenant is for the database"):
        call_command("verify_audit", csv=str(tmp_path / "x.csv"), tenant="acme")


RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "runbook.md"


def _runbooks_check() -> str:
    found = re.search(
        r"<!-- example: offline-audit-check -->\n```python\n(.*?)```", RUNBOOK.read_text(), re.S
    )
    assert found, "docs/runbook.md shows the offline check"
    return found.group(1)


def test_the_runbooks_offline_check_agrees(manager: Client, tmp_path) -> None:
    """The auditor's algorithm in docs/runbook.md, run as written with nothing but Python,
    passes the export ``verify_audit`` passes and finds the edit it finds."""
    script = tmp_path / "check.py"
    script.write_text(_runbooks_check())
    path = _export(manager, tmp_path)

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-I", str(script), str(path)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    clean = run()
    assert clean.returncode == 0, clean.stderr
    assert clean.stdout.startswith(f"OK, {len(AWKWARD)} events, last digest ")
    assert clean.stdout.split()[-1] in _verify(path)
    _rewrite(path, _edit_actor)
    edited = run()
    assert edited.returncode == 1 and "edited at seq 3" in edited.stderr
