"""TTL cleanup of the loaded expired records, batch by batch, in a process of its own (as a
worker would run it); ``python -m bench.cleanup`` prints one JSON line per batch."""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    import django

    django.setup()
    from ledger.services.records import cleanup_expired_records

    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 10**9
    deleted = 0
    while deleted < limit:
        began = time.perf_counter()
        count = cleanup_expired_records(max_batches=1)
        took = time.perf_counter() - began
        if not count:
            break
        deleted += count
        print(json.dumps({"deleted": count, "seconds": round(took, 4)}), flush=True)


if __name__ == "__main__":
    main()
