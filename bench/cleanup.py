"""TTL cleanup of the loaded expired records, batch by batch, in a process of its own (as a
worker would run it); ``python -m bench.cleanup`` prints one JSON line per batch.

A worker is up long before cleanup starts, so this one starts up (Django, its connection) and
says ``{"ready": true}``, then waits for ``go`` on stdin before the first batch (and exits
without one): the hot path measured beside it pays for the cleanup, not for a Python process
starting. When stdin closes after ``go`` it stops after the batch under way: the bench measures
the hot path beside the cleanup for a fixed window, and the batches of that window tell their
length and rate without deleting every expired record.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading


class _Stopped(Exception):
    """The bench closed stdin: no further batch."""


def main() -> None:
    import django

    django.setup()
    from django.db import connection

    from ledger.services.cleanup import cleanup_expired_records

    def say(**line: object) -> None:
        print(json.dumps(line), flush=True)

    connection.ensure_connection()
    say(ready=True)
    if sys.stdin.readline().strip() != "go":
        return  # the bench stopped before the cleanup was to begin
    stop = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()

    def on_batch(count: int, seconds: float) -> None:
        say(deleted=count, seconds=round(seconds, 4))
        if stop.is_set():
            raise _Stopped  # the batch is committed; the loop ends before its pause

    # The worker's own loop, with its pacing between batches.
    with contextlib.suppress(_Stopped):
        cleanup_expired_records(max_batches=10**9, on_batch=on_batch)


if __name__ == "__main__":
    main()
