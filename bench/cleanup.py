"""TTL cleanup of the loaded expired records, batch by batch, in a process of its own (as a
worker would run it); ``python -m bench.cleanup`` prints one JSON line per batch."""

from __future__ import annotations

import json


def main() -> None:
    import django

    django.setup()
    from ledger.services.records import cleanup_expired_records

    def report(count: int, seconds: float) -> None:
        print(json.dumps({"deleted": count, "seconds": round(seconds, 4)}), flush=True)

    # The worker's own loop, with its pacing between batches.
    cleanup_expired_records(max_batches=10**9, on_batch=report)


if __name__ == "__main__":
    main()
