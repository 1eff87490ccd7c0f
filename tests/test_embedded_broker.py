"""The embedded default's broker (console/broker.py): a message is never visible to a worker
before it is written whole. kombu's own file-system transport shows an empty file to a worker
that lists the folder between the file's creation and its write, and the worker stops on the
JSON it cannot read; the same moment with this transport shows nothing, then the message."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection
from kombu.transport import filesystem

from console import broker


def _connection(folder: Path, transport: Any) -> Connection:
    for sub in ("in", "processed", "staging"):
        (folder / sub).mkdir(exist_ok=True)
    options = {
        "data_folder_in": str(folder / "in"),
        "data_folder_out": str(folder / "in"),
        "processed_folder": str(folder / "processed"),
        "store_processed": False,
    }
    return Connection("filesystem://", transport=transport, transport_options=options)


@pytest.fixture
def channels(tmp_path: Path) -> Iterator[Any]:
    def open_pair(transport: Any) -> tuple[Any, Any]:
        writer = _connection(tmp_path, transport).default_channel
        reader = _connection(tmp_path, transport).default_channel
        return writer, reader

    yield open_pair


def test_kombus_own_transport_shows_a_worker_an_empty_message(
    channels: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fault this transport exists for: the reader takes the file kombu has created and
    locked but not yet written."""
    writer, reader = channels(filesystem.Transport)
    seen: list[BaseException] = []

    def read_meanwhile(file: Any, flags: int) -> None:
        try:
            reader._get("tasks")
        except Exception as exc:
            seen.append(exc)

    monkeypatch.setattr(filesystem, "lock", read_meanwhile)
    writer._put("tasks", {"body": "look up record 7"})
    assert seen and isinstance(seen[0], json.JSONDecodeError)


def test_a_message_is_seen_whole_or_not_at_all(
    channels: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer, reader = channels(broker.Transport)
    meanwhile: list[object] = []
    flush = broker.os.fsync

    def read_meanwhile(descriptor: int) -> None:
        flush(descriptor)
        try:
            meanwhile.append(reader._get("tasks"))
        except Exception as exc:
            meanwhile.append(exc)

    monkeypatch.setattr(broker.os, "fsync", read_meanwhile)
    writer._put("tasks", {"body": "look up record 7"})
    assert [type(item).__name__ for item in meanwhile] == ["Empty"]
    assert reader._get("tasks") == {"body": "look up record 7"}


def test_many_messages_written_while_a_worker_reads_arrive_whole(channels: Any) -> None:
    import threading

    writer, reader = channels(broker.Transport)
    received: list[Any] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set() or len(received) < 500:
            try:
                received.append(reader._get("tasks"))
            except Exception as exc:
                if type(exc).__name__ != "Empty":
                    errors.append(exc)
                    return

    worker = threading.Thread(target=read)
    worker.start()
    for n in range(500):
        writer._put("tasks", {"n": n})
    done.set()
    worker.join(30)
    assert not errors and sorted(m["n"] for m in received) == list(range(500))
