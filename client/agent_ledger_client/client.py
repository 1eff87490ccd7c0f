"""The synchronous client: ``LedgerClient`` and its ``Run`` context.

    client = LedgerClient("http://127.0.0.1:8000", token)
    with client.run(user_id="u-42") as run:
        observation = run.call("create_order", {"cart": "c-9"}, execute=create_order,
                               business_object_id="cart-9")

``call`` runs the whole protocol: it records the call, executes it only when the ledger says
so (passing the idempotency key to your function), reports the outcome (a timeout or a lost
connection is *uncertain*, never a plain failure), returns recorded results for duplicates,
backs off while another caller holds the key, and waits for approvals up to a deadline. It
returns the observation to hand to the model.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import httpx

from agent_ledger_client.protocol import (
    DEFAULT_TOOL_TIMEOUT,
    KNOWN_IDEMPOTENT_TOOLS,
    CallContext,
    CallOptions,
    LedgerRequestError,
    ToolError,
    backoff,
    call_body,
    complete_body,
    context_from,
    lease_seconds,
    local_outcome,
    unavailable,
)

Execute = Callable[[CallContext], Any]


class LedgerClient:
    """A tenant's connection to Agent Ledger."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        agent_id: str = "",
        request_timeout: float = 10.0,
        tool_timeouts: dict[str, float] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        if agent_id:
            headers["X-Agent-Id"] = agent_id
        self._http = httpx.Client(
            base_url=base_url.rstrip("/") + "/api/v1",
            headers=headers,
            timeout=request_timeout,
            transport=transport,
        )
        self.tool_timeouts = dict(tool_timeouts or {})
        self.idempotent_tools = set(KNOWN_IDEMPOTENT_TOOLS)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> LedgerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plain requests ---------------------------------------------------------------------
    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self._http.request(method, path, **kwargs)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._request(method, path, **kwargs)
        if response.status_code >= 400:
            raise LedgerRequestError(response.status_code, _problem(response))
        return response.json()

    def register_tool(
        self,
        name: str,
        *,
        idempotency: str | None = None,
        output_schema: dict[str, Any] | None = None,
        key_scope: str | None = None,
        description: str = "",
    ) -> dict[str, Any]:
        """Declare a tool; the server computes its classification."""
        body = {
            "name": name,
            "idempotency": idempotency,
            "output_schema": output_schema,
            "key_scope": key_scope,
            "description": description,
        }
        tool = self._json("POST", "/tools", json={k: v for k, v in body.items() if v})
        if tool["classification"]["idempotency"] == "idempotent":
            self.idempotent_tools.add(name)
        return tool

    def import_mcp_tools(
        self, server: str, trust: str, tools_list: dict[str, Any]
    ) -> list[dict[str, Any]]:
        tools = self._json(
            "POST",
            "/tools/import-mcp",
            json={"server": server, "trust": trust, "tools_list": tools_list},
        )
        for tool in tools:
            if tool["classification"]["idempotency"] == "idempotent":
                self.idempotent_tools.add(tool["name"])
        return tools

    def classify(self, tool: str, tool_input: dict[str, Any]) -> dict[str, Any]:
        return self._json("POST", "/tools/classify", json={"tool": tool, "input": tool_input})

    def lookup(self, idempotency_key: str) -> dict[str, Any] | None:
        response = self._request("GET", "/records", params={"key": idempotency_key})
        if response.status_code == 404:
            return None
        if response.status_code >= 400:
            raise LedgerRequestError(response.status_code, _problem(response))
        return response.json()

    def get_call(self, call_id: str) -> dict[str, Any]:
        return self._json("GET", f"/calls/{call_id}")

    # --- runs -------------------------------------------------------------------------------
    def start_run(
        self, *, user_id: str, run_id: str | None = None, combination_id: int | None = None
    ) -> Run:
        body: dict[str, Any] = {"user_id": user_id}
        if run_id:
            body["run_id"] = run_id
        if combination_id:
            body["combination_id"] = combination_id
        return Run(self, self._json("POST", "/runs", json=body))

    @contextmanager
    def run(
        self, *, user_id: str, run_id: str | None = None, combination_id: int | None = None
    ) -> Iterator[Run]:
        """A run that is finished when the block ends (with the error's type if it raised)."""
        run = self.start_run(user_id=user_id, run_id=run_id, combination_id=combination_id)
        try:
            yield run
        except BaseException as exc:
            run.finish(f"error: {type(exc).__name__}")
            raise
        run.finish("completed")

    # --- the protocol -----------------------------------------------------------------------
    def call(
        self,
        run_id: str,
        tool: str,
        tool_input: dict[str, Any],
        *,
        execute: Execute,
        **options: Any,
    ) -> dict[str, Any]:
        """Record, decide, execute if allowed, report, and return the model's observation."""
        opts = CallOptions(**options)
        body = call_body(run_id, tool, tool_input, opts, read_only=tool in self.idempotent_tools)
        return self._drive(
            lambda: self._request("POST", "/calls", json=body), tool, tool_input, execute, opts
        )

    def replay(
        self,
        call_id: str,
        tool_input: dict[str, Any],
        *,
        execute: Execute,
        current_hash: str | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """Recover an uncertain or failed call by the ledger's recovery table: replay it,
        wait for a human's approval (a conditional write is first checked against
        ``current_hash``, the file's sha256 now), or return why it must not run again."""
        opts = CallOptions(**options)
        body = {"current_hash": current_hash} if current_hash else {}
        return self._drive(
            lambda: self._request("POST", f"/calls/{call_id}/replay", json=body),
            None,
            tool_input,
            execute,
            opts,
        )

    def _drive(
        self,
        send: Callable[[], httpx.Response],
        tool: str | None,
        tool_input: dict[str, Any],
        execute: Execute,
        opts: CallOptions,
    ) -> dict[str, Any]:
        """Follow the ledger's decisions until there is an observation for the model."""
        replays = attempt = 0
        deadline = time.monotonic() + opts.wait_deadline
        while True:
            try:
                response = send()
            except httpx.TransportError as exc:
                return self._without_ledger(tool, tool_input, execute, opts, str(exc))
            if response.status_code >= 500:
                return self._without_ledger(
                    tool, tool_input, execute, opts, f"HTTP {response.status_code}"
                )
            call = response.json()
            if response.status_code >= 400 and "decision" not in call:
                raise LedgerRequestError(response.status_code, call)
            decision = call["decision"]
            if decision == "execute":
                observation = self._execute(call, tool_input, execute, opts)
                if (
                    observation.get("metadata", {}).get("next_action") == "replay"
                    and replays < opts.max_replays
                ):
                    replays += 1  # an idempotent call whose outcome is unknown: run it again
                    continue
                return observation
            if decision == "wait" and time.monotonic() < deadline:
                retry_after = float(response.headers.get("Retry-After", "0") or 0)
                time.sleep(
                    min(backoff(attempt, retry_after), max(0.0, deadline - time.monotonic()))
                )
                attempt += 1
                continue
            if decision == "approval_required":
                return self._await_approval(call, tool_input, execute, opts)
            return call["observation"]

    def _without_ledger(
        self,
        tool: str | None,
        tool_input: dict[str, Any],
        execute: Execute,
        opts: CallOptions,
        reason: str,
    ) -> dict[str, Any]:
        """Fail closed: only a read-only tool runs while the ledger is unreachable."""
        if tool is None or tool not in self.idempotent_tools:
            return unavailable(tool or "the tool", reason)
        context = CallContext("", "", opts.step_id or "", tool, tool_input, "", 0)
        observation = unavailable(tool, reason, executed=True)
        observation["content"] = self._run_tool(execute, context, self._timeout(tool, opts))
        return observation

    def _timeout(self, tool: str, opts: CallOptions) -> float:
        return opts.timeout or self.tool_timeouts.get(tool, DEFAULT_TOOL_TIMEOUT)

    @staticmethod
    def _run_tool(execute: Execute, context: CallContext, timeout: float) -> Any:
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger-tool")
        try:
            return pool.submit(execute, context).result(timeout=timeout)
        finally:
            pool.shutdown(wait=False)  # a timed-out tool thread is abandoned, not awaited

    def _execute(
        self, call: dict[str, Any], tool_input: dict[str, Any], execute: Execute, opts: CallOptions
    ) -> dict[str, Any]:
        context = context_from(call, tool_input)
        stop = threading.Event()
        beat = threading.Thread(
            target=self._heartbeat,
            daemon=True,
            args=(context, lease_seconds(call, datetime.now(UTC)) / 3, stop),
        )
        beat.start()
        result: Any = None
        error: ToolError | None = None
        try:
            result = self._run_tool(execute, context, self._timeout(call["tool"], opts))
            outcome = "succeeded"
        except ToolError as exc:
            outcome, error = "failed", exc
        except (
            FutureTimeout,
            TimeoutError,
            httpx.TimeoutException,
            httpx.TransportError,
            ConnectionError,
        ):
            outcome = "uncertain"  # it may have happened: never a plain failure
        except Exception:
            outcome = "uncertain"
        finally:
            stop.set()
        return self._complete(context, outcome, result, error)

    def _heartbeat(self, context: CallContext, every: float, stop: threading.Event) -> None:
        while not stop.wait(every):
            try:
                self._request(
                    "POST",
                    f"/calls/{context.call_id}/heartbeat",
                    json={"fencing_token": context.fencing_token},
                )
            except httpx.TransportError:
                continue  # the lease may lapse; the ledger will then treat it as unknown

    def _complete(
        self, context: CallContext, outcome: str, result: Any, error: ToolError | None
    ) -> dict[str, Any]:
        body = complete_body(context, outcome, result=result, error=error)
        for attempt in range(4):
            try:
                response = self._request("POST", f"/calls/{context.call_id}/complete", json=body)
            except httpx.TransportError:
                time.sleep(backoff(attempt, None))
                continue
            if response.status_code >= 500:
                time.sleep(backoff(attempt, None))
                continue
            if response.status_code >= 400:
                raise LedgerRequestError(response.status_code, _problem(response))
            observation = response.json()["observation"]
            return observation or local_outcome(context.tool, outcome, result, error, context)
        return local_outcome(context.tool, outcome, result, error, context)

    def _await_approval(
        self, call: dict[str, Any], tool_input: dict[str, Any], execute: Execute, opts: CallOptions
    ) -> dict[str, Any]:
        deadline = time.monotonic() + opts.approval_deadline
        attempt = 0
        latest = call
        while time.monotonic() < deadline:
            latest = self.get_call(call["call_id"])
            state = latest.get("approval_state")
            if state == "approved":
                started = self._json("POST", f"/calls/{call['call_id']}/start")
                return self._execute(started, tool_input, execute, opts)
            if state in ("rejected", "invalidated", "expired") or latest.get("record_state") in (
                "succeeded",
                "failed_final",
            ):
                return latest["observation"]
            time.sleep(min(backoff(attempt, None, cap=2.0), max(0.0, deadline - time.monotonic())))
            attempt += 1
        return latest["observation"]


class Run:
    """A run of an agent: every call goes through ``call``."""

    def __init__(self, client: LedgerClient, data: dict[str, Any]) -> None:
        self.client = client
        self.data = data
        self.run_id: str = data["run_id"]

    def call(
        self, tool: str, tool_input: dict[str, Any], *, execute: Execute, **options: Any
    ) -> dict[str, Any]:
        return self.client.call(self.run_id, tool, tool_input, execute=execute, **options)

    def finish(self, termination_reason: str) -> dict[str, Any]:
        return self.client._json(
            "POST", f"/runs/{self.run_id}/finish", json={"termination_reason": termination_reason}
        )


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {"code": "HTTP_ERROR", "detail": response.text[:500]}
    return body if isinstance(body, dict) else {"code": "HTTP_ERROR", "detail": str(body)}
