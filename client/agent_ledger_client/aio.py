"""The asyncio client: the same protocol as ``LedgerClient``, for ``async`` runtimes.

async with AsyncLedgerClient(url, token) as client:
    run = await client.start_run(user_id="u-42")
    observation = await run.call("send_email", {...}, execute=send, business_object_id="m-1")
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import httpx

from agent_ledger_client.client import _problem
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

AsyncExecute = Callable[[CallContext], Awaitable[Any]]


class AsyncLedgerClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        agent_id: str = "",
        request_timeout: float = 10.0,
        tool_timeouts: dict[str, float] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        if agent_id:
            headers["X-Agent-Id"] = agent_id
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/") + "/api/v1",
            headers=headers,
            timeout=request_timeout,
            transport=transport,
        )
        self.tool_timeouts = dict(tool_timeouts or {})
        self.idempotent_tools = set(KNOWN_IDEMPOTENT_TOOLS)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncLedgerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = await self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise LedgerRequestError(response.status_code, _problem(response))
        return response.json()

    async def import_mcp_tools(
        self, server: str, trust: str, tools_list: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """Import an MCP server's tools/list result; the ledger re-classifies every tool."""
        tools = await self._json(
            "POST",
            "/tools/import-mcp",
            json={"server": server, "trust": trust, "tools_list": tools_list},
        )
        for tool in tools:
            if tool["classification"]["idempotency"] == "idempotent":
                self.idempotent_tools.add(tool["name"])
        return tools

    async def start_run(
        self, *, user_id: str, run_id: str | None = None, combination_id: int | None = None
    ) -> AsyncRun:
        body: dict[str, Any] = {"user_id": user_id}
        if run_id:
            body["run_id"] = run_id
        if combination_id:
            body["combination_id"] = combination_id
        return AsyncRun(self, await self._json("POST", "/runs", json=body))

    async def call(
        self,
        run_id: str,
        tool: str,
        tool_input: dict[str, Any],
        *,
        execute: AsyncExecute,
        **options: Any,
    ) -> dict[str, Any]:
        opts = CallOptions(**options)
        body = call_body(run_id, tool, tool_input, opts, read_only=tool in self.idempotent_tools)
        return await self._drive(
            lambda: self._http.post("/calls", json=body), tool, tool_input, execute, opts
        )

    async def replay(
        self,
        call_id: str,
        tool_input: dict[str, Any],
        *,
        execute: AsyncExecute,
        current_hash: str | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        opts = CallOptions(**options)
        body = {"current_hash": current_hash} if current_hash else {}
        return await self._drive(
            lambda: self._http.post(f"/calls/{call_id}/replay", json=body),
            None,
            tool_input,
            execute,
            opts,
        )

    async def _drive(
        self,
        send: Callable[[], Awaitable[httpx.Response]],
        tool: str | None,
        tool_input: dict[str, Any],
        execute: AsyncExecute,
        opts: CallOptions,
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + opts.wait_deadline
        replays = attempt = 0
        while True:
            try:
                response = await send()
            except httpx.TransportError as exc:
                return await self._without_ledger(tool, tool_input, execute, opts, str(exc))
            if response.status_code >= 500:
                return await self._without_ledger(
                    tool, tool_input, execute, opts, f"HTTP {response.status_code}"
                )
            call = response.json()
            if response.status_code >= 400 and "decision" not in call:
                raise LedgerRequestError(response.status_code, call)
            decision = call["decision"]
            if decision == "execute":
                observation = await self._execute(call, tool_input, execute, opts)
                if (
                    observation.get("metadata", {}).get("next_action") == "replay"
                    and replays < opts.max_replays
                ):
                    replays += 1
                    continue
                return observation
            if decision == "wait" and loop.time() < deadline:
                retry_after = float(response.headers.get("Retry-After", "0") or 0)
                await asyncio.sleep(
                    min(backoff(attempt, retry_after), max(0.0, deadline - loop.time()))
                )
                attempt += 1
                continue
            if decision == "approval_required":
                return await self._await_approval(call, tool_input, execute, opts)
            return call["observation"]

    def _timeout(self, tool: str, opts: CallOptions) -> float:
        return opts.timeout or self.tool_timeouts.get(tool, DEFAULT_TOOL_TIMEOUT)

    async def _without_ledger(
        self,
        tool: str | None,
        tool_input: dict[str, Any],
        execute: AsyncExecute,
        opts: CallOptions,
        reason: str,
    ) -> dict[str, Any]:
        if tool is None or tool not in self.idempotent_tools:
            return unavailable(tool or "the tool", reason)
        context = CallContext("", "", opts.step_id or "", tool, tool_input, "", 0)
        observation = unavailable(tool, reason, executed=True)
        observation["content"] = await asyncio.wait_for(execute(context), self._timeout(tool, opts))
        return observation

    async def _execute(
        self,
        call: dict[str, Any],
        tool_input: dict[str, Any],
        execute: AsyncExecute,
        opts: CallOptions,
    ) -> dict[str, Any]:
        context = context_from(call, tool_input)
        every = lease_seconds(call, datetime.now(UTC)) / 3
        beat = asyncio.create_task(self._heartbeat(context, every))
        result: Any = None
        error: ToolError | None = None
        try:
            result = await asyncio.wait_for(execute(context), self._timeout(call["tool"], opts))
            outcome = "succeeded"
        except ToolError as exc:
            outcome, error = "failed", exc
        except Exception:
            outcome = "uncertain"
        finally:
            beat.cancel()
        return await self._complete(context, outcome, result, error)

    async def _heartbeat(self, context: CallContext, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            try:
                await self._http.post(
                    f"/calls/{context.call_id}/heartbeat",
                    json={"fencing_token": context.fencing_token},
                )
            except httpx.TransportError:
                continue

    async def _complete(
        self, context: CallContext, outcome: str, result: Any, error: ToolError | None
    ) -> dict[str, Any]:
        body = complete_body(context, outcome, result=result, error=error)
        for attempt in range(4):
            try:
                response = await self._http.post(f"/calls/{context.call_id}/complete", json=body)
            except httpx.TransportError:
                await asyncio.sleep(backoff(attempt, None))
                continue
            if response.status_code >= 500:
                await asyncio.sleep(backoff(attempt, None))
                continue
            if response.status_code >= 400:
                raise LedgerRequestError(response.status_code, _problem(response))
            observation = response.json()["observation"]
            return observation or local_outcome(context.tool, outcome, result, error, context)
        return local_outcome(context.tool, outcome, result, error, context)

    async def _await_approval(
        self,
        call: dict[str, Any],
        tool_input: dict[str, Any],
        execute: AsyncExecute,
        opts: CallOptions,
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + opts.approval_deadline
        attempt = 0
        latest = call
        while loop.time() < deadline:
            latest = await self._json("GET", f"/calls/{call['call_id']}")
            state = latest.get("approval_state")
            if state == "approved":
                started = await self._json("POST", f"/calls/{call['call_id']}/start")
                return await self._execute(started, tool_input, execute, opts)
            if state in ("rejected", "invalidated", "expired") or latest.get("record_state") in (
                "succeeded",
                "failed_final",
            ):
                return latest["observation"]
            await asyncio.sleep(
                min(backoff(attempt, None, cap=2.0), max(0.0, deadline - loop.time()))
            )
            attempt += 1
        return latest["observation"]


class AsyncRun:
    def __init__(self, client: AsyncLedgerClient, data: dict[str, Any]) -> None:
        self.client = client
        self.data = data
        self.run_id: str = data["run_id"]

    async def call(
        self, tool: str, tool_input: dict[str, Any], *, execute: AsyncExecute, **options: Any
    ) -> dict[str, Any]:
        return await self.client.call(self.run_id, tool, tool_input, execute=execute, **options)

    async def finish(self, termination_reason: str) -> dict[str, Any]:
        return await self.client._json(
            "POST", f"/runs/{self.run_id}/finish", json={"termination_reason": termination_reason}
        )
