"""The stack's process plumbing: finding the process that serves a connection, and a
process group's members (what the drills kill)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

from drill.stack import group_pids, pids_connected


def test_the_process_holding_a_connection_is_found_by_port() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            with accepted:
                me = os.getpid()
                assert pids_connected([me], port, local=True) == [me]  # the serving side
                assert pids_connected([me], port, local=False) == [me]  # the calling side
                assert pids_connected([me], client.getsockname()[1] + 1, local=True) == []


def test_a_listening_socket_alone_is_not_serving() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert pids_connected([os.getpid()], server.getsockname()[1], local=True) == []


def test_group_pids_lists_a_new_session_and_its_children() -> None:
    process = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30"], start_new_session=True)
    try:
        members: list[int] = []
        for _ in range(50):
            members = group_pids(process.pid)
            if len(members) >= 2:
                break
            time.sleep(0.05)
        assert process.pid in members and len(members) >= 2  # the shell and its sleep(s)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)
    for _ in range(50):  # a killed child is reaped by init a moment later
        if not group_pids(process.pid):
            break
        time.sleep(0.05)
    assert group_pids(process.pid) == []
