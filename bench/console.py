"""``python -m bench.console [--quick] [--reload] [--repeat N]``: the console part of ``make bench``
alone (``make bench-console``): the same rows (``bench.loader``), the same pages and searches
(``bench.console_scale``), measured the same way, in a process started as a web process is.

The loaded database is kept: the next run reuses it while it was loaded by the same loader,
the same migrations and the same sizes (``version``), and less than ``MAX_AGE`` ago (the rows
cover the 24 hours before their load, and the relative time ranges searched move on with the
clock). Otherwise, or with ``--reload``, it is dropped, migrated and loaded afresh (2.5 to 6
minutes at 1,000,000 entries on two cores). The query counts at the small size are kept with
the load and compared only while the pages' code is the one that counted them
(``code_version``). Results go to ``var/bench-console.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: How old a loaded database may be and still be measured.
MAX_AGE = timedelta(hours=2)
#: Tool calls the timeline's run gets before the load (its page shows the first 100).
RUN_CALLS = 200
MARKER_TABLE = "bench_console_load"


def version(sizes: Any) -> str:
    """What the loaded rows depend on: the loader's source, every migration, the sizes."""
    digest = hashlib.sha256((ROOT / "bench" / "loader.py").read_bytes())
    for migration in sorted(ROOT.glob("*/migrations/0*.py")):
        digest.update(migration.relative_to(ROOT).as_posix().encode())
        digest.update(migration.read_bytes())
    digest.update(repr((sizes.records, sizes.unknown, sizes.pending)).encode())
    return digest.hexdigest()[:16]


def code_version() -> str:
    """The code the pages run: the small-size query counts kept with a load are compared with
    the counts at scale only while the pages' code is the one that counted them."""
    digest = hashlib.sha256()
    for folder in ("console", "ledger", "reconcile", "templates"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in {".py", ".html"}:
                digest.update(path.relative_to(ROOT).as_posix().encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _loaded(database_url: str, wanted: str) -> dict[str, Any] | None:
    """The stored load of the bench database, if it is ``wanted``'s and young enough."""
    import psycopg

    try:
        with psycopg.connect(database_url) as conn:
            row = conn.execute(
                f"SELECT version, now() - loaded_at, detail FROM {MARKER_TABLE}"  # noqa: S608
            ).fetchone()
    except psycopg.Error:
        return None  # no database, or no load recorded in it
    if row is None or row[0] != wanted or row[1] > MAX_AGE:
        return None
    detail: dict[str, Any] = row[2]
    detail["age_minutes"] = round(row[1].total_seconds() / 60, 1)
    return detail


def _record_load(wanted: str, detail: dict[str, Any]) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE {MARKER_TABLE} (version text, loaded_at timestamptz, detail jsonb)"
        )
        cursor.execute(
            f"INSERT INTO {MARKER_TABLE} VALUES (%s, now(), %s)",  # noqa: S608 - our table
            [wanted, json.dumps(detail)],
        )


def _run_calls(token: str) -> None:
    """``RUN_CALLS`` tool calls of the bench's run, through the API in-process."""
    from django.test import Client

    from bench.hotpath import call_body, complete_body

    client = Client()
    headers = {"Authorization": f"Bearer {token}"}
    for n in range(RUN_CALLS):
        body = client.post(
            "/api/v1/calls",
            call_body(f"timeline-{n}"),
            content_type="application/json",
            headers=headers,
        ).json()
        done = client.post(
            f"/api/v1/calls/{body['call_id']}/complete",
            complete_body(body["lease"]["fencing_token"]),
            content_type="application/json",
            headers=headers,
        )
        if done.status_code != 200:
            raise RuntimeError(f"complete answered {done.status_code}: {done.content[:200]!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the QUICK sizes")
    parser.add_argument("--reload", action="store_true", help="load afresh even if reusable")
    parser.add_argument("--repeat", type=int, help="requests a page (default: the sizes')")
    args = parser.parse_args()

    from bench.__main__ import FULL, QUICK, log, recreate_database, web_environment

    sizes = QUICK if args.quick else FULL
    database_url = os.environ.get(
        "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/agent_ledger_bench"
    )
    # The console's pages send nothing to the broker; it only has to be a valid URL.
    os.environ.update(web_environment(database_url, "memory://"))
    wanted = version(sizes)
    reused = None if args.reload else _loaded(database_url, wanted)
    if reused is None:
        log(f"fresh database {database_url.rsplit('/', 1)[-1]} (load {wanted})")
        recreate_database(database_url)

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from bench import console_scale, hotpath, loader
    from bench.load import ms
    from bench.report import console_goals, console_table
    from console.startup import freeze_loaded_objects
    from ledger.models import Run, Tenant

    if reused is None:
        call_command("migrate", verbosity=0)
        fixture = hotpath.make_fixture()
        _run_calls(fixture.token)
        tenant, run = fixture.tenant, fixture.run
        small = console_scale.pages_for(tenant, run)
        for name in console_scale.LOADED_ONLY:
            small.pop(name)
        before = console_scale.measure(console_scale.members(tenant), small, 2)
        before.pop("slowest_query")
        log(f"load {sizes.records:,} records with their entries and audit events")
        sizes_loaded = loader.load(
            measured=tenant, records=sizes.records, unknown=sizes.unknown, pending=sizes.pending
        )
        log(f"loaded in {sizes_loaded['load_seconds']} s")
        detail = {"sizes": sizes_loaded, "before": before, "code": code_version()}
        _record_load(wanted, detail)
        reused = {**detail, "age_minutes": 0.0}
    else:
        log(f"reusing the load {wanted}, {reused['age_minutes']} minutes old")
        if reused.get("code") != code_version():
            log("the pages' code changed since the load: no small-size query counts to compare")
            reused["before"] = {"pages": {}}
        tenant = Tenant.objects.get(slug="bench")
        run = Run.objects.get(tenant=tenant, run_id=hotpath.RUN_ID)
    # The pages are measured in this process: start-up like a web process's.
    freeze_loaded_objects()
    clients = console_scale.members(tenant)
    pages = console_scale.pages_for(tenant, run)
    repeat = args.repeat or sizes.page_repeat
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    log(f"console pages x{repeat} (load average {' '.join(load_before)})")
    began = time.monotonic()
    after = console_scale.measure(clients, pages, repeat)
    took, sql = after.pop("slowest_query")
    console = {
        "sizes": reused["sizes"],
        "load_age_minutes": reused["age_minutes"],
        "loadavg_before": load_before,
        "loadavg_after": Path("/proc/loadavg").read_text().split()[:3],
        "seconds": round(time.monotonic() - began, 1),
        "before": reused["before"],
        "after": after,
        "slowest_query": {"ms": ms(took), "sql": sql, "explain": console_scale.explain(sql)},
    }
    connection.close()
    console["goals"] = console_goals(console)
    out = ROOT / "var" / "bench-console.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(console, indent=2, default=str))
    print("\n".join(console_table(console)))
    print(
        f"load average {' '.join(console['loadavg_before'])} before, "
        f"{' '.join(console['loadavg_after'])} after"
    )
    for row in console["goals"]:
        print(f"  [{'met ' if row['met'] else 'MISS'}] {row['goal']}: {row['value']}")
    log(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
