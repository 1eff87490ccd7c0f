"""TTL cleanup of the loaded expired records, batch by batch, in a process of its own (as a
worker would run it); ``python -m bench.cleanup`` prints one JSON line per batch.

A worker is up long before cleanup starts, so this one starts up (Django, its connection) and
says ``{"ready": true}``, then waits for ``go`` on stdin before the first batch (and exits
without one): the hot path measured beside it pays for the cleanup, not for a Python process
starting.
"""

from __future__ import annotations

import json
import sys


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
    # The worker's own loop, with its pacing between batches.
    cleanup_expired_records(
        max_batches=10**9,
        on_batch=lambda count, seconds: say(deleted=count, seconds=round(seconds, 4)),
    )


if __name__ == "__main__":
    main()
