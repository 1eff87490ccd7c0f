"""The embedded default's broker (``make run``): kombu's file-system transport, with each
message written whole before a worker can take it.

kombu writes a message in place in the queue's folder: a worker that lists the folder between
the file's creation and its write takes an empty file and stops on the JSON it cannot read
(kombu issue 1551; seen here as ``make run``'s worker exiting with ``JSONDecodeError``). This
transport writes the message in a folder of its own on the same file system and renames it into
the queue's: a reader sees it whole or not at all. ``CELERY_BROKER_TRANSPORT`` names it for a
``filesystem://`` broker (console/settings.py).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.json import dumps

#: The folder, beside the queue's, where a message is written before it is renamed into it.
STAGING = "staging"


class Channel(filesystem.Channel):
    # kombu's two base classes name the message differently (``payload``, ``message``): the
    # file-system channel's name is kept, so the other's check is silenced.
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """Put ``payload`` onto ``queue``: written under a name of kombu's form in the staging
        folder, flushed, then renamed into the queue's folder in one step."""
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        folder = Path(self.data_folder_out)
        staged = folder.parent / STAGING / name
        try:
            staged.parent.mkdir(exist_ok=True)
            with staged.open("wb") as file:
                file.write(dumps(payload).encode())
                file.flush()
                os.fsync(file.fileno())
            os.replace(staged, folder / name)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {name!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
