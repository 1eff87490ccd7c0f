"""What a long-running process of the service does once the application is loaded."""

from __future__ import annotations

import gc
from importlib import import_module

from django.conf import settings


def freeze_loaded_objects() -> int:
    """Load the URLconf (the views, the API and its schemas), then move every object alive now
    into the garbage collector's permanent generation; returns how many.

    Those objects live as long as the process, yet unfrozen each full collection walks all of
    them: about 95 ms, once every few hundred console requests, in a process with 145,000 of
    them (docs/performance.md). Frozen, a full collection walks only what requests left behind.
    """
    import_module(settings.ROOT_URLCONF)
    gc.collect()  # start-up's garbage is freed, not frozen
    gc.freeze()
    return gc.get_freeze_count()
