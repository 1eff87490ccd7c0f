"""Something slow to make (a virtual environment with packages from the registry) made once a
test run and shared by the xdist workers: in the folder they share, by the first worker to need
it, under a lock; kept only once it is complete, so a build cut short is made again."""

from __future__ import annotations

import fcntl
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def once_per_run(
    tmp_path_factory: pytest.TempPathFactory,
    worker_id: str,
    name: str,
    build: Callable[[Path], None],
) -> Path:
    """The folder ``name``, made by ``build(folder)`` unless this run made it already."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if worker_id != "master" else base
    folder = shared / name
    with (shared / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ready = shared / f"{name}.ready"
        if not ready.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            ready.touch()
    return folder
