"""A web process puts the objects it loads at start-up out of the garbage collector's reach."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.processes import ROOT

PROBE = """
import gc, json, sys
import {module}
print(json.dumps({{
    "frozen": gc.get_freeze_count(),
    "urlconf_loaded": "console.urls" in sys.modules,
}}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("module", ["console.wsgi", "console.asgi"])
def test_a_web_process_freezes_what_it_loaded_so_full_collections_stay_short(
    module: str,
) -> None:
    probe = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    # The URLconf, and with it the views, the API and its schemas, was loaded before the freeze.
    assert found["urlconf_loaded"]
    # Django, the apps and the API (about 120,000 objects): no full collection walks them.
    assert found["frozen"] > 50_000
