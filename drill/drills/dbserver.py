"""The database server itself in trouble, on private clusters (``drill.clusters``) served by
gunicorn as in production (``--timeout 30``, the service's default budget of 20 s) through a
TCP proxy (``drill.tcpproxy``) that stands for the network and, in a failover, for the moved
address: a network 500 ms slow then silent for 60 s, a full disk, the synchronous standby
stopped for 30 s, and the primary killed with SIGKILL and its streaming standby promoted, with
synchronous and with asynchronous replication, under 16 clients sharing keys. The sandbox
counts the create requests each key got.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

import httpx

from agent_ledger_client import CallContext, LedgerClient
from console.csv_export import CHUNK
from drill.clusters import Cluster, available, mount_tmpfs, unmount
from drill.context import DrillContext
from drill.drills import Drill
from drill.drills.store import Runtime, _create, _create_requests
from drill.faultstore import FaultStore, wait_until
from drill.report import DrillResult
from drill.stack import ROOT, Process, free_port, port_open, wait_for
from drill.tcpproxy import TcpProxy

GROUP = "database-server"
#: gunicorn's worker timeout in production (docs/deploy.md) and the service's default budget.
WORKER_TIMEOUT = 30
BUDGET_SECONDS = 20
#: How late past its budget a request may be answered: one connection attempt
#: (``DATABASE_CONNECT_TIMEOUT_SECONDS``) begun just before, and the answer itself.
ANSWER_SLACK = 5 + 1


def _name(label: str) -> str:
    return f"al_drill_{os.getpid()}_{label}"


@dataclass
class Served:
    """A private cluster's database ``ledger``, migrated, behind a proxy, served by one gunicorn."""

    ctx: DrillContext
    cluster: Cluster
    web: str
    env: dict[str, str] = field(default_factory=dict)
    vip: TcpProxy = field(init=False)
    store: FaultStore = field(init=False)
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    def start(self) -> None:
        self.cleanups.append(self.cluster.drop)
        self.ctx.stack.on_stop.append(self.close)  # whatever happens to the drill
        with self.cluster.admin() as conn:
            conn.execute("CREATE DATABASE ledger")
        self.store = FaultStore(self.ctx.stack, embedded=False)
        self.store.url = self.cluster.url("ledger")
        self.store.prepare()
        self.vip = TcpProxy(self.cluster.port)
        self.vip.start()
        self.cleanups.insert(0, self.vip.stop)
        self.cleanups.insert(0, self.store.stop)

    def serve(self) -> None:
        self.store.start_web(
            self.web,
            workers=4,
            timeout=WORKER_TIMEOUT,
            env={
                "DATABASE_URL": f"postgres://postgres@127.0.0.1:{self.vip.port}/ledger",
                **self.env,
            },
        )

    def close(self) -> None:
        while self.cleanups:
            cleanup = self.cleanups.pop(0)
            try:
                cleanup()
            except Exception as exc:
                print(f"drill: cleanup {cleanup} failed: {exc}", flush=True)


class TimedRuntime(Runtime):
    """A runtime that records how long each request took, and in which phase of the drill."""

    def __init__(self, store: FaultStore, web: str, phase: Callable[[], str]) -> None:
        super().__init__(store, web, timeout=WORKER_TIMEOUT + 15)  # longer than any bound
        self.phase = phase
        self.timings: list[tuple[str, float, int, str | None]] = []

    def send(self, method: str, path: str, body: Any = None, **kw: Any) -> httpx.Response | None:
        began = time.monotonic()
        response = super().send(method, path, body, **kw)
        reason = None
        if response is not None and response.status_code == 503:
            reason = response.json().get("reason")
        status = response.status_code if response is not None else 0
        self.timings.append((self.phase(), time.monotonic() - began, status, reason))
        return response


def _summary(timings: list[tuple[str, float, int, str | None]], phase: str) -> dict[str, Any]:
    took = [t for p, t, _s, _r in timings if p == phase]
    return {
        "requests": len(took),
        "p50_seconds": round(median(took), 2) if took else None,
        "max_seconds": round(max(took), 2) if took else None,
        "statuses": dict(Counter(s for p, _t, s, _r in timings if p == phase)),
        "reasons": dict(Counter(r for p, _t, _s, r in timings if p == phase and r)),
    }


def _hammer(
    ctx: DrillContext,
    runtimes: list[TimedRuntime],
    run_id: str,
    stop: threading.Event,
) -> None:
    """Each runtime calls, creates the order when told to execute, and reports, until
    ``stop``; runtimes 2k and 2k+1 send the same carts (duplicate keys)."""

    def loop(n: int) -> None:
        runtime, i = runtimes[n], 0
        while not stop.is_set():
            i += 1
            cart = f"{run_id}-{n // 2}-{i}"
            answer = runtime.call(run_id, cart, step=cart)
            if answer is None or answer.status_code != 200:
                time.sleep(0.3)
                continue
            body = answer.json()
            if body.get("decision") == "execute":
                order = _create(ctx, body["idempotency_key"], cart)
                runtime.complete(body, order, retry_for=BUDGET_SECONDS * 2)

    with ThreadPoolExecutor(len(runtimes)) as pool:
        list(pool.map(loop, range(len(runtimes))))


def _probe(url: str, stop: threading.Event, phase: Callable[[], str], into: list[Any]) -> None:
    while not stop.is_set():
        began = time.monotonic()
        try:
            status = httpx.get(url + "/readyz", timeout=5).status_code
        except httpx.HTTPError:
            status = 0
        into.append((phase(), time.monotonic() - began, status))
        time.sleep(1)


def _bounded_checks(
    result: DrillResult, served: Served, runtimes: list[TimedRuntime], *, stalled: str
) -> None:
    timings = [t for r in runtimes for t in r.timings]
    result.check(
        "every request answered (no caller left without an HTTP answer)",
        bool(timings) and all(status != 0 for _p, _t, status, _r in timings),
        dict(Counter(status for _p, _t, status, _r in timings)),
    )
    # The web server's own time per request (a caller's includes its wait for a free worker).
    server = served.store.server_times(served.web)
    slowest = max((took for _path, _status, took in server), default=0)
    result.facts["server_seconds_max"] = round(slowest, 2)
    result.check(
        f"every request done within the budget ({BUDGET_SECONDS} s, and one connection "
        f"attempt) and before the worker timeout ({WORKER_TIMEOUT} s)",
        bool(server) and slowest < min(BUDGET_SECONDS + ANSWER_SLACK, WORKER_TIMEOUT),
        round(slowest, 2),
    )
    result.check(
        "every failure a 503 with Retry-After, none a 500",
        all(s in (200, 201, 409, 503) for _p, _t, s, _r in timings)
        and not any(r.bad_503 for r in runtimes),
        dict(Counter(s for _p, _t, s, _r in timings)),
    )
    result.check(
        f"503 database_timeout while {stalled}",
        any(p == stalled and r == "database_timeout" for p, _t, _s, r in timings),
        _summary(timings, stalled),
    )


def slow_then_stalled(ctx: DrillContext, result: DrillResult) -> None:
    """16 clients; the network to PostgreSQL gains 500 ms a round trip for 20 s, then passes
    nothing for 60 s, then recovers: every request is answered, success or 503 with
    Retry-After, within the service's budget and before gunicorn's worker timeout; /readyz
    within seconds; calls succeed again within 10 s of the network's return."""
    served = Served(ctx, Cluster(_name("slow")), "web-slow")
    try:
        served.cluster.create(settings={"fsync": "off"})
        served.start()
        served.serve()
        phase = ["steady"]
        runtimes = [TimedRuntime(served.store, served.web, lambda: phase[0]) for _ in range(16)]
        runtimes[0].start_run("slow-run")
        stop = threading.Event()
        probes: list[Any] = []
        url = served.store.url_of(served.web)
        load = threading.Thread(target=_hammer, args=(ctx, runtimes, "slow-run", stop))
        prober = threading.Thread(target=_probe, args=(url, stop, lambda: phase[0], probes))
        load.start()
        prober.start()
        time.sleep(3)
        phase[0], served.vip.delay = "slow", 0.5
        time.sleep(20)
        phase[0] = "stalled"
        served.vip.stall()
        time.sleep(60)
        served.vip.delay = 0.0
        served.vip.resume()
        phase[0] = "recovered"
        back = time.monotonic()
        recovered = wait_until(
            lambda: any(
                p == "recovered" and s == 200 for r in runtimes for p, _t, s, _r in r.timings[-3:]
            ),
            timeout=30,
        )
        time.sleep(5)
        stop.set()
        load.join(WORKER_TIMEOUT * 3)
        prober.join(WORKER_TIMEOUT * 2)
        timings = [t for r in runtimes for t in r.timings]
        ready_stalled = [(t, s) for p, t, s in probes if p == "stalled"]
        result.facts.update(
            {p: _summary(timings, p) for p in ("steady", "slow", "stalled", "recovered")},
            readyz_stalled={
                "probes": len(ready_stalled),
                "max_seconds": round(max((t for t, _s in ready_stalled), default=0), 2),
                "statuses": dict(Counter(s for _t, s in ready_stalled)),
            },
            served_again_after_seconds=recovered and round(recovered, 2),
            since_network_back=round(time.monotonic() - back, 1),
        )
        _bounded_checks(result, served, runtimes, stalled="stalled")
        # With every worker busy on a stalled request a probe waits for one (a load
        # balancer's probe times out: unready all the same); answered, it is never ready.
        result.check(
            "/readyz never 200 while stalled",
            bool(ready_stalled) and all(s != 200 for _t, s in ready_stalled),
            result.facts["readyz_stalled"],
        )
        result.check("calls succeed within 10 s of the network's return", recovered is not None)
        requests = _create_requests(ctx, list(_keys(served)))
        # A reservation answered 503 database_timeout may have committed without its caller
        # hearing "execute": its key has a record and no order, never two.
        twice = {key: n for key, n in requests.items() if n > 1}
        result.check("no key created twice at the sandbox", bool(requests) and not twice, twice)
    finally:
        served.close()


def _keys(served: Served) -> list[str]:
    with served.cluster.admin("ledger") as conn:
        return [row[0] for row in conn.execute("SELECT key FROM ledger_idempotencyrecord")]


def disk_full(ctx: DrillContext, result: DrillResult) -> None:
    """The file system of the data directory fills up (the WAL is elsewhere, as the runbook
    asks): calls are 503 disk_full, never 500; freed, calls succeed within 5 s."""
    mount = Path(f"/var/lib/postgresql/{_name('disk')}")
    wal = Path(f"/var/lib/postgresql/{_name('disk_wal')}")
    served = Served(ctx, Cluster(_name("disk")), "web-disk")
    mounted = False
    try:
        mount_tmpfs(mount, 128)
        mounted = True
        served.cluster.create(settings={"fsync": "off"}, data_dir=mount / "data", wal_dir=wal)
        served.start()
        served.serve()
        runtime = Runtime(served.store, served.web, timeout=WORKER_TIMEOUT + 15)
        runtime.start_run("disk-run")
        filler = mount / "filler"
        with filler.open("wb") as out:
            try:
                while True:
                    out.write(b"\0" * (1 << 20))
                    out.flush()
            except OSError:
                pass
        reasons: list[str | None] = []
        for i in range(300):
            answer = runtime.call("disk-run", f"disk-{i}")
            if answer is not None and answer.status_code == 503:
                reasons.append(answer.json().get("reason"))
                if reasons.count("disk_full") >= 10:
                    break
        filler.unlink()
        n = iter(range(10_000))
        took = wait_until(
            lambda: (
                (a := runtime.call("disk-run", f"disk-after-{next(n)}")) is not None
                and a.status_code == 200
            ),
            timeout=30,
            step=0.2,
        )
        after = [runtime.call("disk-run", f"disk-steady-{i}") for i in range(10)]
        result.facts.update(
            statuses=dict(Counter(runtime.statuses)),
            reasons=dict(Counter(reasons)),
            served_again_after_seconds=took and round(took, 2),
            after=[a.status_code if a else 0 for a in after],
        )
        result.check("a full disk is 503 disk_full", "disk_full" in reasons, result.facts)
        result.check(
            "never a 500, every 503 with Retry-After",
            500 not in runtime.statuses and 0 not in runtime.statuses and not runtime.bad_503,
            dict(Counter(runtime.statuses)),
        )
        result.check("calls succeed within 5 s of space returning", took is not None and took < 5)
        result.check(
            "and keep succeeding", all(a is not None and a.status_code == 200 for a in after)
        )
    finally:
        served.close()
        if mounted:
            unmount(mount)
        shutil.rmtree(mount, ignore_errors=True)
        shutil.rmtree(wal, ignore_errors=True)


# --- replication ------------------------------------------------------------------------------
@dataclass
class Pair:
    """A primary and its streaming standby, reached by the service through ``served.vip``; the
    standby streams through ``link``, a proxy the drill can stall (a standby falling behind)."""

    served: Served
    standby: Cluster
    link: TcpProxy
    synchronous: bool


_pairs: dict[str, Pair] = {}


def _pair(ctx: DrillContext, label: str, *, synchronous: bool) -> Pair:
    if label in _pairs:
        return _pairs[label]
    env = {"DATABASE_REQUIRE_SYNCHRONOUS_COMMIT": "true" if synchronous else "false"}
    served = Served(ctx, Cluster(_name(f"{label}_p")), f"web-{label}", env)
    served.cluster.create(settings={"fsync": "off"})
    served.start()
    link = TcpProxy(served.cluster.port)
    link.start()
    served.cleanups.insert(0, link.stop)
    standby = Cluster(_name(f"{label}_s"))
    served.cleanups.append(standby.drop)
    served.cluster.standby(standby.name, upstream_port=link.port, replica=standby)
    if synchronous:
        _make_synchronous(served.cluster, standby.name)
    served.serve()
    pair = _pairs[label] = Pair(served, standby, link, synchronous)
    return pair


def _make_synchronous(primary: Cluster, standby_name: str) -> None:
    """The documented settings (docs/deploy.md): commits wait for the standby to flush."""
    primary.set("synchronous_standby_names", f"'{standby_name}'")
    primary.set("synchronous_commit", "on")


def sync_standby_stopped(ctx: DrillContext, result: DrillResult) -> None:
    """Synchronous replication; the only standby stops for 30 s under 16 clients: every
    request is answered (503 database_timeout with Retry-After, or success) within the budget,
    none hangs; writes succeed again within 10 s of the standby's return."""
    pair = _pair(ctx, "sync", synchronous=True)
    served = pair.served
    phase = ["steady"]
    runtimes = [TimedRuntime(served.store, served.web, lambda: phase[0]) for _ in range(16)]
    runtimes[0].start_run("standby-run")
    stop = threading.Event()
    load = threading.Thread(target=_hammer, args=(ctx, runtimes, "standby-run", stop))
    load.start()
    time.sleep(4)
    phase[0] = "standby_down"
    pair.standby.stop()
    time.sleep(30)
    phase[0] = "standby_back"  # it streams as soon as it starts, before start() returns
    back = time.monotonic()
    pair.standby.start()
    streaming = wait_until(lambda: served.cluster.streaming_to(pair.standby.name), timeout=30)
    recovered = wait_until(
        lambda: any(
            p == "standby_back" and s == 200 and t < 5
            for r in runtimes
            for p, t, s, _r in r.timings[-3:]
        ),
        timeout=30,
    )
    time.sleep(3)
    stop.set()
    load.join(WORKER_TIMEOUT * 4)
    timings = [t for r in runtimes for t in r.timings]
    result.facts.update(
        {p: _summary(timings, p) for p in ("steady", "standby_down", "standby_back")},
        standby_streaming_again_after_seconds=streaming and round(streaming, 2),
        served_again_after_seconds=recovered and round(recovered, 2),
        since_standby_back=round(time.monotonic() - back, 1),
    )
    _bounded_checks(result, served, runtimes, stalled="standby_down")
    result.check("writes succeed within 10 s of the standby's return", recovered is not None)
    requests = _create_requests(ctx, _keys(served))
    # A reservation answered 503 database_timeout may have committed without its caller
    # hearing "execute": its key has a record and no order, never two.
    twice = {key: n for key, n in requests.items() if n > 1}
    result.check("no key created twice at the sandbox", bool(requests) and not twice, twice)


@dataclass
class Ledgered:
    """What the clients were answered, by call id."""

    reserved: dict[str, str] = field(default_factory=dict)  # call id -> key, told "execute"
    completed: set[str] = field(default_factory=set)  # reports the ledger acknowledged
    decided: set[str] = field(default_factory=set)  # any other answer naming a call
    not_run_again: int = 0  # the client's rule refused to run a key it had run
    lock: threading.Lock = field(default_factory=threading.Lock)


def _fail_over(ctx: DrillContext, result: DrillResult, pair: Pair, *, one_client: bool) -> None:
    """16 client threads (2 per cart) call, create and report; the standby's link stalls for
    3 s (it falls behind), the primary is killed with SIGKILL, the standby promoted and the
    address moved to it; then every thread sends again every call it made, as a runtime
    resuming its run does. What the clients were answered is then looked for on the new
    primary, and the sandbox's counts say what ran twice."""
    served = pair.served
    web = served.store.url_of(served.web)

    def client() -> LedgerClient:
        return LedgerClient(web, served.store.token, request_timeout=10, ledger_budget=25)

    shared = client() if one_client else None
    clients = [shared or client() for _ in range(16)]
    seen = Ledgered()
    carts: list[list[str]] = [[] for _ in range(16)]
    stop = threading.Event()
    run_id = f"fo-{'sync' if pair.synchronous else 'async'}"

    def call(n: int, run: Any, cart: str) -> None:
        ran: list[str] = []

        def create(call_ctx: CallContext) -> Any:
            with seen.lock:
                seen.reserved[call_ctx.call_id] = call_ctx.idempotency_key
            ran.append(call_ctx.call_id)
            return _create(ctx, call_ctx.idempotency_key, cart)

        observation = run.call(
            "create_order", {"cart": cart}, execute=create, business_object_id=cart
        )
        metadata = observation.get("metadata") or {}
        with seen.lock:
            if ran and observation.get("ok") and not metadata.get("replayed"):
                seen.completed.add(ran[0])
            elif metadata.get("call_id") and metadata.get("recorded", True):
                seen.decided.add(str(metadata["call_id"]))
            if "NOT run again" in str(observation.get("content")):
                seen.not_run_again += 1

    def loop(n: int) -> None:
        run = clients[n].start_run(user_id="u", run_id=run_id)
        i = 0
        while not stop.is_set():
            i += 1
            cart = f"{run_id}-{n // 2}-{i}"
            carts[n].append(cart)
            call(n, run, cart)
        for cart in list(carts[n]):  # the runtime resumes its run: every call sent again
            call(n, run, cart)

    with ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(loop, n) for n in range(16)]
        time.sleep(5)
        pair.link.stall()  # the standby receives nothing from here on
        time.sleep(3)
        served.cluster.kill9()
        pair.standby.promote()
        served.vip.retarget(pair.standby.port)
        served.vip.cut()
        moved = time.monotonic()
        if pair.synchronous:
            # The promoted primary serves only once it has a synchronous standby of its own.
            refused = _refused_until_synchronous(served)
            again = Cluster(_name("sync_s2"))
            served.cleanups.append(again.drop)
            pair.standby.standby(again.name, replica=again)
            _make_synchronous(pair.standby, again.name)
            result.facts["refused_without_a_standby"] = refused
        time.sleep(8)
        stop.set()
        for future in futures:
            future.result()
    result.facts["failover_seconds"] = round(time.monotonic() - moved, 1)
    with pair.standby.admin("ledger") as conn:
        entries = dict(
            conn.execute(
                "SELECT call_id::text, status FROM ledger_ledgerentry WHERE call_id = ANY(%s)",
                [list({*seen.reserved, *seen.completed, *seen.decided})],
            ).fetchall()
        )
    lost = {
        "reservations": sorted(c for c in seen.reserved if c not in entries),
        "completions": sorted(c for c in seen.completed if entries.get(c) != "succeeded"),
        "decisions": sorted(c for c in seen.decided if c not in entries),
    }
    requests = _create_requests(ctx, sorted(set(seen.reserved.values())))
    twice = {key: n for key, n in requests.items() if n > 1}
    result.facts.update(
        answered={
            "execute": len(seen.reserved),
            "completions": len(seen.completed),
            "other_decisions": len(seen.decided),
        },
        lost={kind: len(ids) for kind, ids in lost.items()},
        lost_call_ids={kind: ids[:10] for kind, ids in lost.items()},
        not_run_again_by_the_client=seen.not_run_again,
        keys_created_twice=twice,
        one_client_for_all_threads=one_client,
    )
    for key in list(seen.reserved.values())[:50]:
        result.add_key(key)
    if pair.synchronous:
        result.check(
            "synchronous: 0 acknowledged reservations, completions or decisions lost",
            bool(seen.reserved) and not any(lost.values()),
            result.facts["lost"],
        )
        result.check(
            "synchronous: the promoted primary is refused until it has a synchronous standby",
            result.facts["refused_without_a_standby"],
        )
    else:
        result.check(
            "known hazard shown: asynchronous replication lost acknowledged answers",
            bool(lost["reservations"] or lost["completions"]),
            result.facts["lost"],
        )
        result.check(
            "the client's rule refused to run again a key the ledger lost",
            seen.not_run_again > 0,
            seen.not_run_again,
        )
    result.check("0 duplicate side effects at the sandbox", not twice, twice)


def _refused_until_synchronous(served: Served) -> bool:
    """Whether calls to the promoted primary, which has no standby yet, are answered 503
    replication_not_synchronous (a few tries: the first may still find the old connection)."""
    runtime = Runtime(served.store, served.web, timeout=WORKER_TIMEOUT + 15)
    for i in range(10):
        answer = runtime.call("refusal-run", f"refused-{i}")
        if (
            answer is not None
            and answer.status_code == 503
            and answer.json().get("reason") == "replication_not_synchronous"
        ):
            return True
        time.sleep(0.3)
    return False


def failover_sync(ctx: DrillContext, result: DrillResult) -> None:
    """Synchronous replication (docs/deploy.md), 16 separate clients: the primary is killed
    and its standby promoted; nothing any client was answered is lost, nothing runs twice."""
    pair = _pair(ctx, "sync", synchronous=True)
    try:
        _fail_over(ctx, result, pair, one_client=False)
    finally:
        pair.served.close()
        _pairs.pop("sync", None)


def failover_async(ctx: DrillContext, result: DrillResult) -> None:
    """Asynchronous replication, the hazard docs/deploy.md warns about: a promoted standby
    lacks acknowledged answers. The 16 threads share one client, whose rule (a key it ran is
    never run again on the ledger's word that it is new) keeps the lost keys from running twice."""
    pair = _pair(ctx, "async", synchronous=False)
    try:
        _fail_over(ctx, result, pair, one_client=True)
    finally:
        pair.served.close()
        _pairs.pop("async", None)


# --- behind PgBouncer --------------------------------------------------------------------------
#: The runbook's settings behind PgBouncer 1.18 in transaction mode: no start-up options
#: (PgBouncer refuses them) and the timeouts on the role instead; no prepared statements.
BOUNCER_ENV = {"DATABASE_TIMEOUTS_AT_CONNECT": "false", "DATABASE_PREPARED_STATEMENTS": "false"}
ROLE_TIMEOUTS = {
    "lock_timeout": "'2s'",
    "statement_timeout": "'15s'",
    "idle_in_transaction_session_timeout": "'30s'",
    "idle_session_timeout": "'120s'",
}
OPERATOR = ("drill-operator", "drill-operator-password-0123")
_OPERATOR_SETUP = f"""
from django.contrib.auth import get_user_model
from ledger.models import Membership, Tenant
user = get_user_model().objects.create_user({OPERATOR[0]!r}, password={OPERATOR[1]!r})
Membership.objects.create(user=user, tenant=Tenant.objects.get(slug="faults"), role="operator")
"""


def _start_pgbouncer(ctx: DrillContext, served: Served) -> int:
    """PgBouncer (Debian's, 1.18) in transaction mode in front of the cluster, with a pool
    smaller than the web workers' connections, so server connections change hands."""
    home = Path(f"/var/lib/postgresql/{_name('bouncer')}")
    home.mkdir(exist_ok=True)
    port = free_port()
    (home / "userlist.txt").write_text('"postgres" ""\n')
    (home / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"ledger = host=127.0.0.1 port={served.cluster.port} dbname=ledger\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {home / 'userlist.txt'}\n"
        "pool_mode = transaction\ndefault_pool_size = 3\nmax_client_conn = 200\n"
    )
    for path in [home, *home.iterdir()]:
        shutil.chown(path, "postgres", "postgres")
    process = Process(
        "pgbouncer",
        ["pgbouncer", "-u", "postgres", str(home / "pgbouncer.ini")],
        ctx.stack.logs / "pgbouncer.log",
        dict(os.environ),
    )
    ctx.stack.processes["pgbouncer"] = process
    process.start()
    served.cleanups.insert(0, process.stop)
    served.cleanups.append(lambda: shutil.rmtree(home, ignore_errors=True))
    wait_for(lambda: port_open(port), timeout=15, what="pgbouncer")
    return port


def _signed_in(url: str) -> httpx.Client:
    """An operator's console session. Its cookies are secure ones (production settings), which
    a client sends only over HTTPS: over the drill's plain HTTP they are sent by hand."""
    browser = httpx.Client(base_url=url, timeout=WORKER_TIMEOUT + 15)

    def carry_cookies() -> None:
        browser.headers["Cookie"] = "; ".join(f"{c.name}={c.value}" for c in browser.cookies.jar)

    page = browser.get("/login/")
    carry_cookies()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token, page.text[:500]
    done = browser.post(
        "/login/",
        data={"username": OPERATOR[0], "password": OPERATOR[1], "csrfmiddlewaretoken": token[1]},
        headers={"Referer": url + "/login/"},
    )
    assert done.status_code == 302, done.text[:500]
    carry_cookies()
    return browser


def _seed_entries(cluster: Cluster, at_least: int) -> None:
    """Copies of the calls made so far (each with a call id of its own) until there are
    ``at_least``: an export then spans several batches, without minutes of load first."""
    with cluster.admin("ledger") as conn:
        columns = [
            row[0]
            for row in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = "
                "'ledger_ledgerentry' AND column_name NOT IN ('id', 'call_id')"
            )
        ]
        names = ", ".join(columns)
        while True:
            row = conn.execute("SELECT count(*) FROM ledger_ledgerentry").fetchone()
            if not row or row[0] >= at_least or not row[0]:
                return
            conn.execute(
                f"INSERT INTO ledger_ledgerentry (call_id, {names}) "  # noqa: S608 - our columns
                f"SELECT gen_random_uuid(), {names} FROM ledger_ledgerentry LIMIT %s",
                [at_least - row[0]],
            )


def _export(browser: httpx.Client) -> tuple[int, int, bool]:
    """Export the calls list: its status, its data rows, and whether the body arrived whole."""
    try:
        with browser.stream("GET", "/ledger/", params={"format": "csv"}) as response:
            body = b"".join(response.iter_bytes())
    except httpx.HTTPError:
        return 0, 0, False
    rows = list(csv.reader(io.StringIO(body.decode())))
    whole = body.endswith(b"\n") and bool(rows) and rows[0][:2] == ["when", "tool"]
    return response.status_code, max(0, len(rows) - 1), whole


def behind_pgbouncer(ctx: DrillContext, result: DrillResult) -> None:
    """PgBouncer 1.18 in transaction mode with the runbook's settings: 12 clients on the hot
    path (duplicate keys) and 4 exporting the calls list as CSV at once, for 40 s: no error,
    no key run twice, every export whole, the last one every row."""
    if not shutil.which("pgbouncer"):
        result.check("pgbouncer is installed (Debian's package; .ci/run installs it)", False)
        return
    cluster = Cluster(_name("bouncer"))
    served = Served(ctx, cluster, "web-bouncer")
    try:
        cluster.create(settings={"fsync": "off"})
        served.start()
        for name, value in ROLE_TIMEOUTS.items():
            cluster.set_role("postgres", name, value)
        subprocess.run(  # noqa: S603 - our own argv
            [sys.executable, "manage.py", "shell", "-c", _OPERATOR_SETUP],
            cwd=ROOT,
            env=served.store.env(),
            check=True,
            capture_output=True,
        )
        bouncer = _start_pgbouncer(ctx, served)
        served.env = {
            **BOUNCER_ENV,
            "DATABASE_URL": f"postgres://postgres@127.0.0.1:{bouncer}/ledger",
        }
        served.serve()
        url = served.store.url_of(served.web)
        phase = ["load"]
        runtimes = [TimedRuntime(served.store, served.web, lambda: phase[0]) for _ in range(12)]
        runtimes[0].start_run("bouncer-run")
        stop = threading.Event()
        exports: list[tuple[int, int, bool]] = []

        def exporter() -> None:
            browser = _signed_in(url)
            while not stop.is_set():
                exports.append(_export(browser))

        load = threading.Thread(target=_hammer, args=(ctx, runtimes, "bouncer-run", stop))
        load.start()
        time.sleep(5)
        _seed_entries(cluster, 2 * CHUNK + 500)
        with ThreadPoolExecutor(4) as pool:
            exporting = [pool.submit(exporter) for _ in range(4)]
            time.sleep(40)
            stop.set()
            load.join(WORKER_TIMEOUT * 3)
            for future in exporting:
                future.result()
        with cluster.admin("ledger") as conn:
            counted = conn.execute("SELECT count(*) FROM ledger_ledgerentry").fetchone()
        entries = int(counted[0]) if counted else 0
        final = _export(_signed_in(url))
        timings = [t for r in runtimes for t in r.timings]
        requests = _create_requests(ctx, _keys(served))
        twice = {key: n for key, n in requests.items() if n > 1}
        result.facts.update(
            hot_path=_summary(timings, "load"),
            exports=len(exports),
            exports_whole=sum(1 for status, _n, whole in exports if status == 200 and whole),
            export_rows_max=max((n for _s, n, _w in exports), default=0),
            final_export={"status": final[0], "rows": final[1], "whole": final[2]},
            entries=entries,
            keys_created_twice=twice,
        )
        result.check(
            "no error on the hot path (no 500, no 503, no caller without an answer)",
            bool(timings) and all(s in (200, 201, 409) for _p, _t, s, _r in timings),
            result.facts["hot_path"],
        )
        result.check("0 duplicate side effects at the sandbox", not twice, twice)
        result.check(
            "every export under load whole",
            bool(exports) and result.facts["exports_whole"] == len(exports),
            exports[:20],
        )
        result.check(
            "the last export has every call, in more than one batch",
            final == (200, entries, True) and entries > CHUNK,
            result.facts["final_export"],
        )
    finally:
        served.close()


def _unavailable(ctx: DrillContext, result: DrillResult) -> str | None:
    why = available()
    if why:
        result.check(f"private clusters can be made here ({why})", False)
    return why


def _needs_clusters(run: Callable[[DrillContext, DrillResult], None]) -> Callable[..., None]:
    def guarded(ctx: DrillContext, result: DrillResult) -> None:
        if _unavailable(ctx, result) is None:
            run(ctx, result)

    guarded.__doc__ = run.__doc__
    return guarded


DRILLS = [
    Drill(
        "database_slow_then_stalled",
        GROUP,
        "the network to PostgreSQL 500 ms slow for 20 s, then silent for 60 s, under 16 clients",
        _needs_clusters(slow_then_stalled),
    ),
    Drill(
        "disk_full",
        GROUP,
        "the data directory's file system full, then freed",
        _needs_clusters(disk_full),
    ),
    Drill(
        "sync_standby_stopped",
        GROUP,
        "synchronous replication, the only standby stopped for 30 s under 16 clients",
        _needs_clusters(sync_standby_stopped),
    ),
    Drill(
        "failover_sync",
        GROUP,
        "synchronous replication: primary killed with SIGKILL, standby promoted, 16 clients",
        _needs_clusters(failover_sync),
    ),
    Drill(
        "failover_async",
        GROUP,
        "asynchronous replication: primary killed, standby promoted (the known hazard)",
        _needs_clusters(failover_async),
    ),
    Drill(
        "pgbouncer_exports",
        GROUP,
        "behind PgBouncer 1.18 in transaction mode: the hot path and CSV exports at once",
        _needs_clusters(behind_pgbouncer),
    ),
]
