"""A stand-in for autovacuum, for a PostgreSQL that runs without it.

The machines the bench runs on set ``autovacuum = off`` (a CI configuration file), which
production must not (docs/runbook.md). Without it the hot path's tables, new and growing, are
never analysed, and PostgreSQL's CPU per request grows as they do: 1.12 to 1.47 ms a request over
20 s at 32 clients in one measurement, 0.89 to 0.93 ms after an ``ANALYZE``
(docs/performance.md). So while the hot path is measured, this does what
autovacuum would: a ``VACUUM (ANALYZE)`` at once and then every ``autovacuum_naptime``, in the
measured windows, its CPU counted with PostgreSQL's as autovacuum's would be.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any

import psycopg


class AutovacuumStandIn:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT current_setting('autovacuum')::bool, "
                "(SELECT setting::int FROM pg_settings WHERE name = 'autovacuum_naptime')"
            ).fetchone()
        assert row is not None
        self.server_runs_autovacuum, self.naptime = bool(row[0]), float(row[1])
        self.passes: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> AutovacuumStandIn:
        if not self.server_runs_autovacuum:
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while True:
                began = time.monotonic()
                conn.execute("VACUUM (ANALYZE)")
                self.passes.append(time.monotonic() - began)
                if self._stop.wait(self.naptime):
                    return

    def summary(self) -> dict[str, Any]:
        if self.server_runs_autovacuum:
            return {"server_runs_autovacuum": True}
        return {
            "server_runs_autovacuum": False,
            "naptime_s": self.naptime,
            "passes": len(self.passes),
            "seconds": round(sum(self.passes), 2),
        }
