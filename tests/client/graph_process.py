"""A LangGraph agent in a process of its own, its checkpoints and store in PostgreSQL: it
orders cart-9 through the ledger and hangs in the order's call (the sandbox holds the answer),
so the test can kill it mid-call and resume its thread elsewhere.

    python tests/client/graph_process.py   # LEDGER_URL, LEDGER_TOKEN, SANDBOX_URL, GRAPH_DB
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.store.postgres.aio import AsyncPostgresStore

from agent_ledger_client import AsyncLedgerClient
from agent_ledger_client.integrations.langgraph import LedgerToolCalls

THREAD = {"configurable": {"thread_id": "thread-killed"}}
ORDER = {"name": "create_order", "args": {"cart": "cart-9"}, "id": "tc-1"}


@tool
async def create_order(cart: str) -> str:
    """Create an order for a cart."""
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{os.environ['SANDBOX_URL']}/orders/objects", json={"reference": cart}, timeout=120
        )
    return response.text


def graph(
    model: GenericFakeChatModel,
    calls: LedgerToolCalls,
    saver: AsyncPostgresSaver,
    store: AsyncPostgresStore,
) -> Any:
    """The agent: the model, then its tool calls through the ledger, until it stops."""
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", ToolNode([create_order], awrap_tool_call=calls))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver, store=store)


async def main() -> None:
    database = os.environ["GRAPH_DB"]
    async with (
        AsyncPostgresSaver.from_conn_string(database) as saver,
        AsyncPostgresStore.from_conn_string(database) as store,
        AsyncLedgerClient(os.environ["LEDGER_URL"], os.environ["LEDGER_TOKEN"]) as ledger,
    ):
        await saver.setup()
        await store.setup()
        model = GenericFakeChatModel(messages=iter([AIMessage("", tool_calls=[ORDER])]))
        calls = LedgerToolCalls(ledger, user_id="u1")
        await graph(model, calls, saver, store).ainvoke({"messages": [HumanMessage("go")]}, THREAD)


if __name__ == "__main__":
    asyncio.run(main())
