"""The tools the framework adapters' tests give their agents: plain typed functions with
docstrings, which each framework wraps in its own way (``@tool``, ``@function_tool``, a
``FunctionToolset``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx

from sandbox.server import SandboxServer


def order_tool(sandbox: SandboxServer, timeout: float = 0.5) -> Callable[[str], Awaitable[str]]:
    """``create_order`` against the sandbox's orders service (a short timeout by default, so a
    ``timeout_after_commit`` fault loses the response after the order was made)."""

    async def create_order(cart: str) -> str:
        """Create an order for a cart."""
        async with httpx.AsyncClient() as http:
            response = await http.post(
                f"{sandbox.url}/orders/objects", json={"reference": cart}, timeout=timeout
            )
        response.raise_for_status()
        return response.text

    return create_order


def flaky_write_tool(sandbox: SandboxServer, attempts: list[str]) -> Callable[[str, str], str]:
    """``write_file`` into the sandbox's workspace whose first attempt loses its connection
    before anything is written."""

    def write_file(path: str, content: str) -> str:
        """Write a file in the workspace."""
        attempts.append(path)
        if len(attempts) == 1:
            raise ConnectionResetError("the workspace connection was lost")
        response = httpx.put(
            f"{sandbox.url}/workspace/files/{path}", json={"content": content}, timeout=2
        )
        response.raise_for_status()
        return "written"

    return write_file


def status_tool(reads: list[str]) -> Callable[[str], Awaitable[str]]:
    """``get_order_status``, a read: each call that runs is listed in ``reads``."""

    async def get_order_status(order: str) -> str:
        """Look up an order's status."""
        reads.append(order)
        return f"{order} is pending"

    return get_order_status


def amount_order_tool(sandbox: SandboxServer) -> Callable[[int], Awaitable[str]]:
    """``create_order`` of an amount, counted at the sandbox by its reference ``amount-N``."""

    async def create_order(amount: int) -> str:
        """Create an order of an amount."""
        async with httpx.AsyncClient() as http:
            response = await http.post(
                f"{sandbox.url}/orders/objects", json={"reference": f"amount-{amount}"}, timeout=5
            )
        response.raise_for_status()
        return response.text

    return create_order
