"""``python -m bench [--quick]``: run every benchmark in one go (see bench/__init__)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import psycopg

if TYPE_CHECKING:
    from bench.processes import Service

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = 3  # per load level, alternating hot path, framework floor and raw floor


@dataclass(frozen=True)
class Sizes:
    seconds: float  # per load level
    levels: tuple[int, ...]
    callers: int
    records: int  # each with a ledger entry and an audit event (bench.loader)
    unknown: int
    pending: int  # approvals waiting
    page_repeat: int
    reconcile_records: int
    cleanup_load_seconds: float


# The hot path's levels reach 256 clients: whether its rate holds as clients queue for the
# server's workers and database connections.
LEVELS = (1, 8, 32, 64, 128, 256)
QUICK = Sizes(3, LEVELS, 100, 30_000, 1_000, 20, 5, 400, 3)
FULL = Sizes(15, LEVELS, 100, 1_000_000, 20_000, 300, 20, 3_000, 30)


def cores() -> int:
    """The cores the bench sizes its server and load generator for: ``CORES``, else this
    machine's."""
    return int(os.environ.get("CORES") or os.cpu_count() or 1)


def recreate_database(url: str) -> None:
    parsed = urlparse(url)
    name = parsed.path.lstrip("/")
    admin = parsed._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def machine(database_url: str, redis_url: str) -> dict[str, Any]:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    redis_version = subprocess.run(
        ["redis-server", "--version"],  # noqa: S607 - the redis-server on PATH, as tests use
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    mem_kb = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    return {
        "cores": os.cpu_count(),
        "sized_for_cores": cores(),
        "ram_gb": round(mem_kb / 1024 / 1024, 1),
        "cpu": next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            platform.processor(),
        ),
        "python": platform.python_version(),
        "postgresql": row[0] if row else "?",
        "redis": redis_version,
        "redis_url": redis_url,
    }


# The calls of one model turn (bench.hotpath.Calls), from as many clients.
BATCH = 8
BATCH_CLIENTS = 8


def batch_against_alone(
    load: Any, web_pid: int, port: int, token: str, seconds: float
) -> dict[str, Any]:
    """The server's CPU (web and PostgreSQL) for a batch of ``BATCH`` calls against one call
    sent alone, in interleaved rounds; both answer ``execute`` for every call."""
    from bench import cpu, hotpath
    from bench.load import merge

    meter = cpu.CpuMeter(cpu.web_groups(web_pid, load.pids))
    alone, together = [], []
    for n in range(ROUNDS):
        work = hotpath.Calls(port, token, f"alone{n}", 1, batch=False)
        alone.append(
            meter.measure("alone", partial(load.run, BATCH_CLIENTS, seconds / ROUNDS, work))
        )
        work = hotpath.Calls(port, token, f"batch{n}", BATCH, batch=True)
        together.append(
            meter.measure("batch", partial(load.run, BATCH_CLIENTS, seconds / ROUNDS, work))
        )
    one, batches = merge(alone), merge(together)
    per_call = meter.per_unit_ms("alone", one.units)
    per_batch = meter.per_unit_ms("batch", batches.units)
    server = ("web", "postgres")
    return {
        "size": BATCH,
        "clients": BATCH_CLIENTS,
        "cpu_ms_per_call_alone": per_call,
        "cpu_ms_per_batch": per_batch,
        "server_cpu_batch_in_calls_alone": round(
            sum(per_batch[g] for g in server) / sum(per_call[g] for g in server), 2
        )
        if one.units and batches.units
        else None,
        "calls_alone_per_second": round(one.per_second, 1),
        "calls_in_batches_per_second": round(batches.per_second * BATCH, 1),
        "errors": one.errors + batches.errors,
    }


def web_environment(database_url: str, broker_url: str) -> dict[str, str]:
    """The environment of the bench's processes: production settings, the bench's database."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "DATABASE_URL": database_url,
        "CELERY_BROKER_URL": broker_url,
        "DEBUG": "false",
        "SECURE_SSL_REDIRECT": "false",
        "ALLOWED_HOSTS": "testserver,localhost,127.0.0.1",
        "STATIC_MANIFEST": "false",
        "LOG_LEVEL": os.environ.get("LOG_LEVEL", "WARNING"),
        # The sandbox the look-ups ask listens on 127.0.0.1 (ledger/outbound.py).
        "LEDGER_OUTBOUND_ALLOW_PRIVATE": "true",
    }
    env.setdefault("SECRET_KEY", "bench-only-secret-key-not-for-production-0123456789abcdef")
    return env


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _exit_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="same shape, smaller numbers")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    database_url = os.environ.get(
        "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/agent_ledger_bench"
    )
    logdir = ROOT / "var" / "bench"
    logdir.mkdir(parents=True, exist_ok=True)

    from bench import processes

    log(f"fresh database {urlparse(database_url).path.lstrip('/')}")
    recreate_database(database_url)
    redis, redis_url = processes.start_redis(logdir)
    env = web_environment(database_url, redis_url)
    os.environ.update(env)
    # A SIGTERM (or Ctrl-C) still runs the finally below, which stops every process started.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    services: list[processes.Service] = [redis]
    sampler = processes.MemorySampler()
    results: dict[str, Any] = {}
    out = ROOT / "var" / "bench.json"
    try:
        run(
            results,
            sizes,
            args.quick,
            database_url,
            redis,
            redis_url,
            env,
            logdir,
            services,
            sampler,
        )
    except BaseException:
        # What was measured before the run stopped (an error, a signal) is kept, marked so.
        out.write_text(json.dumps({**results, "stopped": True}, indent=2, default=str))
        log(f"stopped; what was measured is in {out.relative_to(ROOT)}")
        raise
    finally:
        sampler.stop()
        for service in reversed(services):
            service.stop()
    from bench.report import goals, table

    results["goals"] = goals(results)
    out.write_text(json.dumps(results, indent=2, default=str))
    print(table(results))
    log(f"wrote {out.relative_to(ROOT)}")


# The hot path and its three floors, measured in this order at every level of every round.
SERIES = ("hot_path", "framework_floor", "django_sql_floor", "raw_sql_floor")


def level_row(meter: Any, measured: dict[str, list[Any]]) -> dict[str, Any]:
    """One level's figures from its rounds of each series (``bench.load.LoadResult``s) and the
    CPU ``meter`` that measured them."""
    from bench.load import merge, ms, percentile

    hot, framework = merge(measured["hot_path"]), merge(measured["framework_floor"])
    raw, django_sql = merge(measured["raw_sql_floor"]), merge(measured["django_sql_floor"])
    row = hot.summary("calls")
    row["cpu_ms_per_request"] = {
        "hot_path": meter.per_unit_ms("hot_path", hot.units * 2),
        "framework_floor": meter.per_unit_ms("framework_floor", framework.units),
        "django_sql_floor": meter.per_unit_ms("django_sql_floor", django_sql.units * 2),
        "raw_sql_floor": meter.per_unit_ms("raw_sql_floor", raw.units * 2),
    }
    row["requests_per_second"] = round(hot.per_second * 2, 1)
    row["raw_calls_per_second"] = round(raw.per_second, 1)
    row["raw_p50_ms"] = ms(percentile(raw.latencies, 0.5))
    row["raw_p99_ms"] = ms(percentile(raw.latencies, 0.99))
    row["framework_requests_per_second"] = round(framework.per_second, 1)
    row["framework_p99_ms"] = ms(percentile(framework.latencies, 0.99))
    row["django_sql_requests_per_second"] = round(django_sql.per_second * 2, 1)
    row["ratio_vs_raw_sql"] = round(hot.per_second / raw.per_second, 3) if raw.units else 0
    row["ratio_vs_framework"] = (
        round(hot.per_second * 2 / framework.per_second, 3) if framework.units else 0
    )
    # The ceiling of ratio_vs_framework for any Django view sending these statements.
    row["django_sql_ratio_vs_framework"] = (
        round(django_sql.per_second * 2 / framework.per_second, 3) if framework.units else 0
    )
    row["raw_errors"], row["framework_errors"] = raw.errors, framework.errors
    row["django_sql_errors"] = django_sql.errors
    return row


def run(
    results: dict[str, Any],
    sizes: Sizes,
    quick: bool,
    database_url: str,
    redis: Service,
    redis_url: str,
    env: dict[str, str],
    logdir: Path,
    services: list[Any],
    sampler: Any,
) -> None:
    """Every benchmark, each adding its part to ``results`` as it ends."""
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from bench import console_scale, contention, cpu, hotpath, loader, processes, request_size
    from bench import reconcile_throughput as reconcile
    from bench.autovacuum import AutovacuumStandIn
    from bench.floor import FLOOR_TABLE_SQL
    from bench.load import LoadGenerator, ms, percentile
    from console.startup import freeze_loaded_objects
    from ledger.services.cleanup import expired_records

    started = time.monotonic()
    results.update(
        mode="quick" if quick else "full",
        machine=machine(database_url, redis_url),
        started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    log("migrate")
    call_command("migrate", verbosity=0)
    # The console pages are measured in this process: start-up like a web process's.
    freeze_loaded_objects()
    with connection.cursor() as cursor:
        cursor.execute(FLOOR_TABLE_SQL)
    fixture = hotpath.make_fixture()

    log("statements per request")
    hotpath.capture_statements(fixture.token, "warm-up")  # first use registers the tool
    hotpath.bump_sequences()
    counts, captured = hotpath.capture_statements(fixture.token, "capture")
    hotpath.verify_replay(database_url, captured)
    results["statements"] = counts
    log("CPU per request by input size")
    results["request_size"] = request_size.measure(fixture)
    connection.close()

    statements_file = logdir / "statements.pickle"
    hotpath.save(captured, statements_file)
    web_env = {**env, "BENCH_SQL_FLOOR_STATEMENTS": str(statements_file)}
    workers = 2 * cores() + 1
    gunicorn, port = processes.start_gunicorn(logdir, web_env, workers)
    services.append(gunicorn)
    sampler.watch["web"].append(gunicorn)
    sampler.start()
    # The clients run in processes of their own, one a core (two at least), so that the load
    # generator is never the limit it measures.
    load = LoadGenerator(max(2, cores()))
    services.append(load)
    # The raw floor holds as many transactions open at once as the web workers can: one
    # connection a client would measure PostgreSQL's slowdown under 256 backends on these
    # cores, which no deployment of the service (at most a connection a worker) meets.
    raw_connections = workers
    results["server"] = {
        "gunicorn_workers": workers,
        "worker_class": "sync",
        "load_generator_processes": len(load.processes),
        "raw_floor_connections": raw_connections,
    }

    log("warm-up")
    hotpath.hot_path(load, port, fixture.token, 8, 1.0, "warm")
    hotpath.framework_floor(load, port, 8, 1.0, "warm")
    hotpath.django_sql_floor(load, port, 8, 1.0, "warm")
    # Where the server runs without autovacuum, a stand-in does its work (bench.autovacuum).
    standin = AutovacuumStandIn(database_url)
    meters = {c: cpu.CpuMeter(cpu.web_groups(gunicorn.pid, load.pids)) for c in sizes.levels}
    measured: dict[int, dict[str, list[Any]]] = {c: {s: [] for s in SERIES} for c in sizes.levels}
    part = sizes.seconds / ROUNDS
    with standin:
        # Interleaved rounds: a burst of load from elsewhere on the machine hits the hot path
        # and the floors alike, and the run's own drift (its tables grow, the stand-in vacuums
        # them) reaches every level alike, so the series compares client counts, not moments.
        for n in range(ROUNDS):
            for clients in sizes.levels:
                log(f"round {n + 1} of {ROUNDS}: hot path and floors at {clients} client(s)")
                tag = f"{clients}-{n}"
                rounds = {
                    "hot_path": partial(
                        hotpath.hot_path, load, port, fixture.token, clients, part, f"hot{tag}"
                    ),
                    "framework_floor": partial(
                        hotpath.framework_floor, load, port, clients, part, f"fw{tag}"
                    ),
                    "django_sql_floor": partial(
                        hotpath.django_sql_floor, load, port, clients, part, f"sql{tag}"
                    ),
                    "raw_sql_floor": partial(
                        hotpath.raw_sql_floor,
                        load,
                        database_url,
                        captured,
                        clients,
                        part,
                        f"raw{tag}",
                        connections=raw_connections,
                    ),
                }
                for series, measure in rounds.items():
                    measured[clients][series].append(meters[clients].measure(series, measure))
    by_clients = {
        str(clients): level_row(meters[clients], measured[clients]) for clients in sizes.levels
    }
    results["hot_path"] = {
        "seconds_per_level": sizes.seconds,
        "by_clients": by_clients,
        "autovacuum": standin.summary(),
    }

    log(f"a batch of {BATCH} calls against {BATCH} calls alone, {BATCH_CLIENTS} clients")
    results["batch"] = batch_against_alone(load, gunicorn.pid, port, fixture.token, sizes.seconds)

    log(f"contention: {sizes.callers} callers on one key")
    single_p99 = by_clients[str(sizes.levels[0])]["calls_p99_ms"]
    result = contention.one_key(port, fixture.token, sizes.callers, "contended-key")
    result["single_request_p99_ms"] = single_p99
    result["budget_ms"] = round(2 * single_p99, 2)
    results["contention"] = result

    log("console at small size")
    members = console_scale.members(fixture.tenant)
    pages = console_scale.pages_for(fixture.tenant, fixture.run)
    for name in console_scale.LOADED_ONLY:
        pages.pop(name)
    before = console_scale.measure(members, pages, 2)
    before.pop("slowest_query")
    log(f"load {sizes.records:,} records with their entries and audit events")
    loaded = loader.load(
        measured=fixture.tenant,
        records=sizes.records,
        unknown=sizes.unknown,
        pending=sizes.pending,
    )
    log(
        f"loaded in {loaded['load_seconds']} s, vacuumed in {loaded['vacuum_seconds']} s; "
        f"console pages x{sizes.page_repeat}"
    )
    # The searches again, for ids of the loaded rows (the loader's run, its newest approval).
    pages = console_scale.pages_for(fixture.tenant, fixture.run)
    after = console_scale.measure(members, pages, sizes.page_repeat)
    took, sql = after.pop("slowest_query")
    results["console"] = {
        "sizes": loaded,
        "before": before,
        "after": after,
        "slowest_query": {"ms": ms(took), "sql": sql, "explain": console_scale.explain(sql)},
    }
    connection.close()

    log("cleanup: hot path before, then during the cleanup")
    expired = expired_records().count()
    cleaner = subprocess.Popen(
        [sys.executable, "-m", "bench.cleanup"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    batches: list[dict[str, Any]] = []
    try:
        assert cleaner.stdin is not None and cleaner.stdout is not None
        ready, _, _ = select.select([cleaner.stdout], [], [], 120)
        if not ready or json.loads(cleaner.stdout.readline() or "{}") != {"ready": True}:
            raise RuntimeError("the cleanup process did not start")
        baseline = hotpath.hot_path(
            load, port, fixture.token, 8, sizes.cleanup_load_seconds, "pre-clean"
        )
        reader = threading.Thread(
            target=lambda: batches.extend(json.loads(line) for line in cleaner.stdout or []),
            daemon=True,
        )
        reader.start()
        cleaner.stdin.write("go\n")
        cleaner.stdin.flush()
        cleaning_began = time.monotonic()
        during = hotpath.hot_path(
            load, port, fixture.token, 8, sizes.cleanup_load_seconds, "in-clean"
        )
        # The window is measured: the cleaner stops after the batch under way.
        cleaner.stdin.close()
        if cleaner.wait() != 0:
            raise RuntimeError(f"the cleanup process failed with exit code {cleaner.returncode}")
        reader.join(10)
    finally:
        if cleaner.poll() is None:
            cleaner.kill()
            cleaner.wait()
    seconds = [b["seconds"] for b in batches]
    deleted = sum(b["deleted"] for b in batches)
    cleaning_took = time.monotonic() - cleaning_began
    p99_before, p99_during = (
        percentile(baseline.latencies, 0.99),
        percentile(during.latencies, 0.99),
    )
    results["cleanup"] = {
        "expired": expired,
        "deleted": deleted,
        "batches": len(batches),
        "batch_p50_s": round(percentile(seconds, 0.5), 3),
        "batch_max_s": round(max(seconds, default=0.0), 3),
        "seconds": round(cleaning_took, 1),
        "per_second": round(deleted / cleaning_took, 1) if cleaning_took else 0,
        # At the window's pace, every expired record (the cleanup stops with the window).
        "all_expired_s": round(expired * cleaning_took / deleted, 1) if deleted else None,
        "hot_path_clients": 8,
        "p99_before_ms": ms(p99_before),
        "p99_during_ms": ms(p99_during),
        "p99_ratio": round(p99_during / p99_before, 2) if p99_before else 0,
    }

    log("reconciliation throughput")
    sandbox, sandbox_url = processes.start_sandbox(logdir)
    services.append(sandbox)
    reconcile.arm_latency(sandbox_url, 50)
    rtool = reconcile.setup(fixture.tenant, sandbox_url)
    concurrency = 8
    runs: dict[str, Any] = {"downstream_latency_ms": 50, "threads_per_worker": concurrency}
    for count, label in ((1, "one_worker"), (2, "two_workers")):
        # Every worker is up before the first task is sent (they start one after the other),
        # and the backlog is queued while they are held, then released together: the rate is
        # that of all of them together, without the producer's CPU taken from them.
        workers_now = [
            processes.start_worker(f"bench{count}-{i}", logdir, env, concurrency)
            for i in range(count)
        ]
        services.extend(workers_now)
        sampler.watch["worker"].extend(workers_now)
        nodes = [processes.worker_node(worker) for worker in workers_now]
        ids = reconcile.make_unknown(fixture.tenant, rtool, sizes.reconcile_records, label)
        reconcile.hold(nodes)
        enqueue_s = reconcile.enqueue(ids)
        # Where a look-up's CPU goes: the workers, and what they share the cores with.
        meter = cpu.CpuMeter(reconcile.cpu_groups(workers_now, redis, sandbox))
        reconcile.release(nodes)
        settled = meter.measure("look-ups", partial(reconcile.settle, ids, timeout=300))
        runs[label] = reconcile.summary(count, settled, len(ids), enqueue_s)
        runs[label]["cpu_ms_per_lookup"] = meter.per_unit_ms("look-ups", settled["resolved"])
        log(f"{label}: {runs[label]['per_minute']}/min")
        for worker in workers_now:
            worker.stop()
    results["reconcile"] = runs
    results["memory"] = {
        "web_peak_mb": round(sampler.peak["web"], 1),
        "worker_peak_mb": round(sampler.peak["worker"], 1),
    }
    results["duration_s"] = round(time.monotonic() - started, 1)


if __name__ == "__main__":
    main()
