"""Python client for Agent Ledger. Importable without Django; depends only on httpx."""

from agent_ledger_client.aio import AsyncLedgerClient, AsyncRun
from agent_ledger_client.client import LedgerClient, Run
from agent_ledger_client.protocol import CallContext, LedgerRequestError, ToolError

__all__ = [
    "AsyncLedgerClient",
    "AsyncRun",
    "CallContext",
    "LedgerClient",
    "LedgerRequestError",
    "Run",
    "ToolError",
]
