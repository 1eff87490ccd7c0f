"""The synchronous driver: ``LedgerClient`` and its ``Run`` context.

    client = LedgerClient("http://127.0.0.1:8000", token)
    with client.run(user_id="u-42") as run:
        observation = run.call("create_order", {"cart": "c-9"}, execute=create_order)

Every operation is a flow of ``agent_ledger_client.protocol``; this driver only performs its
actions with httpx, threads and ``time.sleep``. ``call`` records the call, executes it only when
the ledger says so (passing the idempotency key to your function), reports the outcome (a
timeout or a lost connection is *uncertain*, never a plain failure), returns recorded results
for duplicates, backs off while another caller holds the key, and waits for approvals up to a
deadline. It returns the observation to hand to the model.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

import httpx

from agent_ledger_client import protocol as p
from agent_ledger_client.mirroring import Mirror
from agent_ledger_client.surface import Surface, http_arguments

T = TypeVar("T")


class LedgerClient(Surface):
    """A tenant's connection to Agent Ledger (blocking)."""

    _http: httpx.Client

    def _open(self, transport: httpx.BaseTransport | None) -> httpx.Client:
        return httpx.Client(base_url=self.api_url, headers=self.headers, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> LedgerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start_run(
        self,
        *,
        user_id: str,
        run_id: str | None = None,
        combination_id: int | None = None,
        shadow_of: str | None = None,
    ) -> Run:
        """Start a run (idempotent for a given ``run_id``); with ``shadow_of``, a shadow run
        mirroring that live run (its side-effecting calls never execute)."""
        flow = self.protocol.start_run(
            user_id=user_id, run_id=run_id, combination_id=combination_id, shadow_of=shadow_of
        )
        return Run(self, self.drive(flow))

    @contextmanager
    def run(self, **start: Any) -> Iterator[Run]:
        """A run (``start_run``'s arguments) that is finished when the block ends, with the
        error's type if it raised."""
        run = self.start_run(**start)
        try:
            yield run
        except BaseException as exc:
            run.finish(f"error: {type(exc).__name__}")
            raise
        run.finish("completed")

    def mirror(self, live: Run, agent: Callable[[Run], Any]) -> Run | None:
        """Mirror a live run when the ledger asks for it (``live.mirror``): start the shadow
        run pinned to the combination in shadow, run ``agent`` on it (the live run's input,
        through the candidate) and finish it. Returns the shadow run, or None when the live
        run is not mirrored. ``agent``'s exception finishes the shadow run and goes on."""
        mirror = live.mirror
        if mirror is None:
            return None
        with self.run(**mirror.start) as shadow:
            agent(shadow)
        return shadow

    # --- the driver -------------------------------------------------------------------------
    def drive(self, flow: p.Flow[T]) -> T:
        """Perform the flow's actions until it returns. A ``KeyboardInterrupt`` while the tool
        runs is reported uncertain before it goes on."""
        reply: p.Reply = None
        try:
            while True:
                action = flow.send(reply)
                try:
                    reply = self._perform(action)
                except BaseException as exc:
                    if isinstance(action, p.Execute):
                        self._settle(flow, p.executed_after(exc))
                    raise
        except StopIteration as done:
            return done.value

    def _settle(self, flow: p.Flow[Any], reply: p.Reply) -> None:
        """Send an interrupted call's report; nothing runs again."""
        try:
            while not isinstance(action := flow.send(reply), p.Execute):
                reply = self._perform(action)
        except StopIteration:
            return
        flow.close()

    def _perform(self, action: p.Action) -> p.Reply:
        if isinstance(action, p.Send):
            return self._send(action.request)
        if isinstance(action, p.Sleep):
            time.sleep(action.seconds)
            return None
        return self._execute(action)

    def _send(self, request: p.Request) -> p.Response | p.TransportFailure:
        try:
            response = self._http.request(**http_arguments(request))
        except httpx.TransportError as exc:
            return p.TransportFailure(str(exc) or type(exc).__name__)
        return p.response_of(response.status_code, response.headers, response.content)

    def _execute(self, action: p.Execute) -> p.Executed:
        stop = threading.Event()
        if action.heartbeat_every is not None:
            threading.Thread(
                target=self._heartbeat, args=(action, stop), daemon=True, name="ledger-heartbeat"
            ).start()
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger-tool")
        try:
            future = pool.submit(action.execute, action.context)
            return p.Executed("succeeded", future.result(timeout=action.timeout))
        except Exception as exc:
            return p.executed_after(exc)
        finally:
            stop.set()
            pool.shutdown(wait=False)  # a timed-out tool thread is abandoned, not awaited

    def _heartbeat(self, action: p.Execute, stop: threading.Event) -> None:
        every = action.heartbeat_every
        while every is not None and not stop.wait(every):
            reply = self._send(p.heartbeat_request(action.context, self.protocol.request_timeout))
            every = p.next_heartbeat(reply, every)


class Run:
    """A run of an agent: every call goes through ``call``."""

    def __init__(self, client: LedgerClient, data: dict[str, Any]) -> None:
        self.client = client
        self.data = data
        self.run_id: str = data["run_id"]

    @property
    def mirror(self) -> Mirror | None:
        """The shadow run the ledger asks to mirror this live run with, or None."""
        return Mirror.of(self.data)

    def call(
        self,
        tool: str,
        tool_input: dict[str, Any],
        *,
        execute: Callable[[p.CallContext], Any],
        **options: Any,
    ) -> dict[str, Any]:
        """``LedgerClient.call`` in this run."""
        return self.client.call(self.run_id, tool, tool_input, execute=execute, **options)

    def finish(self, termination_reason: str) -> dict[str, Any]:
        return self.client.finish_run(self.run_id, termination_reason)
