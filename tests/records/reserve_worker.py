"""A separate OS process that reserves one key, for the multi-process concurrency test.

Usage: python -m tests.records.reserve_worker TENANT_ID TOOL_ID KEY FINGERPRINT START_AT
Waits until START_AT (a UNIX time) so all processes hit PostgreSQL together, then prints the
reservation as one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import time

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
django.setup()

from ledger.domain import DataClassification, ReplayPolicy  # noqa: E402
from ledger.models import Tenant, Tool  # noqa: E402
from ledger.records import reserve_key  # noqa: E402


def main() -> None:
    tenant_id, tool_id, key, fingerprint, start_at = sys.argv[1:6]
    tenant = Tenant.objects.get(pk=int(tenant_id))
    tool = Tool.objects.get(pk=int(tool_id))
    owner = f"pid-{os.getpid()}"
    delay = float(start_at) - time.time()
    if delay > 0:
        time.sleep(delay)
    reservation = reserve_key(
        tenant=tenant,
        tool=tool,
        key=key,
        fingerprint=fingerprint,
        replay_policy=ReplayPolicy(tool.replay_policy),
        data_classification=DataClassification.INTERNAL,
        lease_owner=owner,
        actor=owner,
    )
    print(
        json.dumps(
            {
                "decision": reservation.decision.value,
                "created": reservation.created,
                "code": reservation.code.value if reservation.code else None,
            }
        )
    )


if __name__ == "__main__":
    main()
