"""Settings for the benchmark's own server processes: production settings plus the bench-only
URLconf (the framework floor), so production never exposes that view."""

from console.settings import *  # noqa: F403

ROOT_URLCONF = "bench.urls"
