"""Private PostgreSQL clusters for the drills and tests that break the database server itself:
kill it, fill its disk, stop its standby, fail it over. Made with Debian's
``pg_createcluster`` (the ``postgresql`` package that .ci/run installs; it needs root), each on
a free port with a name of its own, and dropped afterwards. The shared server at
127.0.0.1:5432 is never stopped or reconfigured.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from drill.stack import free_port, wait_for

VERSION = "15"
#: Settings every private cluster gets: small and fast, for a drill's few minutes.
BASE_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "max_connections": "200",
    "shared_buffers": "'32MB'",
    "wal_level": "replica",
    "max_wal_senders": "4",
    "wal_keep_size": "'64MB'",
}


def available() -> str | None:
    """Why private clusters cannot be made here, or None when they can."""
    if shutil.which("pg_createcluster") is None:
        return "pg_createcluster not found (Debian's postgresql-common)"
    if os.geteuid() != 0:
        return "pg_createcluster needs root"
    if not Path(f"/usr/lib/postgresql/{VERSION}/bin/postgres").exists():
        return f"PostgreSQL {VERSION} server not installed"
    return None


def _run(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip() or done.stdout}")
    return done.stdout


@dataclass
class Cluster:
    """One private cluster: ``create``, then ``url()`` to reach it, ``drop`` when done."""

    name: str
    port: int = 0

    def __post_init__(self) -> None:
        self.port = self.port or free_port()

    @property
    def conf_dir(self) -> Path:
        return Path(f"/etc/postgresql/{VERSION}/{self.name}")

    @property
    def data_dir(self) -> Path:
        found = _run("pg_conftool", VERSION, self.name, "show", "-s", "data_directory").strip()
        return Path(found)

    def url(self, database: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def create(
        self,
        *,
        settings: dict[str, str] | None = None,
        data_dir: Path | None = None,
        wal_dir: Path | None = None,
        start: bool = True,
    ) -> None:
        """A new cluster (trust authentication on 127.0.0.1, replication allowed)."""
        self.drop()  # one of the same name left by an interrupted run
        argv = ["pg_createcluster", VERSION, self.name, "--port", str(self.port), "-q"]
        if data_dir is not None:
            argv += ["-d", str(data_dir)]
        argv += ["--", "--auth=trust"]
        if wal_dir is not None:
            argv += [f"--waldir={wal_dir}"]
        _run(*argv)
        self.configure({**BASE_SETTINGS, **(settings or {})})
        if start:
            self.start()

    def configure(self, settings: dict[str, str]) -> None:
        """Write ``settings`` into the cluster's own configuration (read at its next start)."""
        with (self.conf_dir / "conf.d" / "drill.conf").open("a") as conf:
            for name, value in settings.items():
                conf.write(f"{name} = {value}\n")

    def start(self) -> None:
        _run("pg_ctlcluster", VERSION, self.name, "start")
        wait_for(self.accepts, timeout=30, what=f"cluster {self.name}")

    def stop(self) -> None:
        _run("pg_ctlcluster", VERSION, self.name, "stop", "-m", "fast")

    def promote(self) -> None:
        _run("pg_ctlcluster", VERSION, self.name, "promote")
        wait_for(lambda: not self.in_recovery(), timeout=30, what=f"{self.name} promoted")

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill9(self) -> None:
        """SIGKILL the postmaster and every process it started: a crashed server."""
        from drill.faultstore import _alive, _children

        pid = self.postmaster_pid()
        if pid is None:
            return
        for victim in [pid, *_children(pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
        wait_for(lambda: not _alive(pid), timeout=10, what=f"{self.name} to die")

    def accepts(self) -> bool:
        try:
            with psycopg.connect(
                self.url().replace("postgres://", "postgresql://"), connect_timeout=2
            ):
                return True
        except psycopg.Error:
            return False

    def admin(self, database: str = "postgres") -> psycopg.Connection[Any]:
        return psycopg.connect(
            self.url(database).replace("postgres://", "postgresql://"),
            autocommit=True,
            connect_timeout=5,
        )

    def in_recovery(self) -> bool:
        with self.admin() as conn:
            row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        return bool(row and row[0])

    def set(self, name: str, value: str) -> None:
        """``ALTER SYSTEM SET`` and reload: the change applies to every session's next command."""
        with self.admin() as conn:
            conn.execute(f"ALTER SYSTEM SET {name} = {value}")
            conn.execute("SELECT pg_reload_conf()")

    def set_role(self, role: str, name: str, value: str) -> None:
        """``ALTER ROLE ... SET``: what every new session of ``role`` starts with."""
        with self.admin() as conn:
            conn.execute(f"ALTER ROLE {role} SET {name} = {value}")

    def standby(
        self, name: str, *, upstream_port: int | None = None, replica: Cluster | None = None
    ) -> Cluster:
        """A streaming standby of this cluster (``replica``, or a new cluster named ``name``),
        copied with ``pg_basebackup``; it connects to ``upstream_port`` (this cluster's, or a
        proxy's in front of it) as ``name``."""
        replica = replica or Cluster(name)
        replica.create(start=False)
        data = replica.data_dir
        for child in data.iterdir():  # emptied, not removed: its parent may be root's
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        _run(
            "runuser", "-u", "postgres", "--",
            f"/usr/lib/postgresql/{VERSION}/bin/pg_basebackup",
            "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
            "-D", str(data), "-X", "stream", "--checkpoint=fast",
        )  # fmt: skip
        (data / "standby.signal").touch()
        shutil.chown(data / "standby.signal", "postgres", "postgres")
        replica.configure(
            {
                "primary_conninfo": (
                    f"'host=127.0.0.1 port={upstream_port or self.port} user=postgres "
                    f"application_name={name}'"
                ),
                "hot_standby": "on",
            }
        )
        replica.start()
        wait_for(lambda: self.streaming_to(name), timeout=30, what=f"{name} to stream")
        return replica

    def streaming_to(self, application_name: str) -> bool:
        with self.admin() as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_replication "
                "WHERE application_name = %s AND state = 'streaming'",
                [application_name],
            ).fetchone()
        return bool(row and row[0])

    def drop(self) -> None:
        """Stop the cluster (however it is) and remove it with its data."""
        if not self.conf_dir.exists():
            return
        with contextlib.suppress(RuntimeError):
            _run("pg_ctlcluster", VERSION, self.name, "stop", "-m", "immediate")
        _run("pg_dropcluster", VERSION, self.name)


def mount_tmpfs(path: Path, megabytes: int) -> None:
    """A file system of ``megabytes`` at ``path``, owned by postgres: a disk a drill can fill."""
    path.mkdir(exist_ok=True)
    _run("mount", "-t", "tmpfs", "-o", f"size={megabytes}m,mode=0700", "tmpfs", str(path))
    shutil.chown(path, "postgres", "postgres")


def unmount(path: Path) -> None:
    _run("umount", "-l", str(path))
