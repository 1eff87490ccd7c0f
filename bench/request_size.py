"""CPU per request for inputs holding one long unbroken token (letters, digits, ``.`` and
``-``): the work of a request grows linearly with its size, so no request can hold a web
worker for long. Measured in this process (``time.process_time``: CPU, not wall time) through
Django's test client, the middleware, the parser, redaction and fingerprinting included.

- 1 KB, 64 KB and 1 MB, with the body and string limits raised so even 1 MB is answered;
- 1 MB under the default limits, which refuse it (413) without reading it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from django.conf import settings
from django.test import Client, override_settings

from bench.hotpath import RUN_ID, TOOL, Fixture

SIZES = {"1KB": 1024, "64KB": 64 * 1024, "1MB": 1024 * 1024}
# The shapes that made a pattern free to start inside a run rescan it.
TOKENS = {"letters": "a", "dotted": "a.", "dashed": "a-", "digits": "1"}


def _post(client: Client, token: str, text: str, key: str) -> tuple[int, float]:
    body = json.dumps(
        {
            "run_id": RUN_ID,
            "step_id": f"size-{key}",
            "tool": TOOL,
            "input": {"note": text},
            "business_object_id": f"size-{key}",
        }
    )
    began = time.process_time()
    response = client.post(
        "/api/v1/calls",
        data=body,
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )
    return response.status_code, round((time.process_time() - began) * 1000, 1)


def measure(fixture: Fixture) -> dict[str, Any]:
    client = Client()
    _post(client, fixture.token, "warm-up", "warm-up")  # first use of the tool registers it
    answered: dict[str, dict[str, Any]] = {}
    raised = {
        "DATA_UPLOAD_MAX_MEMORY_SIZE": 4 * 1024 * 1024,
        "LEDGER_MAX_STRING_CHARS": 2 * 1024 * 1024,
    }
    with override_settings(**raised):
        for size_name, size in SIZES.items():
            for shape, unit in TOKENS.items():
                text = (unit * (size // len(unit) + 1))[:size]
                status, cpu_ms = _post(client, fixture.token, text, f"{size_name}-{shape}")
                answered.setdefault(size_name, {})[shape] = {"status": status, "cpu_ms": cpu_ms}
    text = "a" * SIZES["1MB"]
    status, cpu_ms = _post(client, fixture.token, text, "1MB-default-limits")
    return {
        "answered": answered,
        "max_cpu_ms": {
            size: max(v["cpu_ms"] for v in shapes.values()) for size, shapes in answered.items()
        },
        "refused_1MB": {"status": status, "cpu_ms": cpu_ms},
        "limits": {
            "LEDGER_MAX_BODY_BYTES": settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
            "LEDGER_MAX_STRING_CHARS": settings.LEDGER_MAX_STRING_CHARS,
        },
    }
