"""A deliberately repeated identical write through ``agent-ledger-mcp``: the MCP client names
the business object in the request's ``_meta`` (``io.agentledger/business-object-id``).
Identical calls under two business ids are two actions; under the same one, or under none,
one. Counted in mcp-server-sqlite's real rows, never in the ledger's."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path
from typing import Any, cast

import pytest
from mcp.types import RequestParamsMeta

from agent_ledger_client.mcp_proxy import BUSINESS_OBJECT_META_KEY
from tests.client.mcp_effects import World, sql
from tests.client.mcp_retries import Answer, Proxy, answer_of
from tests.client.test_mcp_guard_servers import Shim

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("npx") is None, reason="the official servers need Node (npx)"),
]
INSERT = {"query": "INSERT INTO orders (cart) VALUES ('cart-42')"}
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"


def _documented_request() -> dict[str, Any]:
    """The ``tools/call`` request docs/integrations.md shows for a repeated action."""
    block = re.search(
        r"<!-- request: business-object-id -->\n```json\n(.*?)```", GUIDE.read_text(), re.S
    )
    assert block, "docs/integrations.md shows no request with a business object id"
    request: dict[str, Any] = json.loads(block.group(1))
    return request


def _meta(business_object_id: Any) -> RequestParamsMeta | None:
    if business_object_id is None:
        return None
    return cast(RequestParamsMeta, {BUSINESS_OBJECT_META_KEY: business_object_id})


def _inserting(
    proxy: Proxy, world: World, business_object_ids: list[Any]
) -> tuple[list[Answer], int]:
    """The same INSERT once per business id (None: the client names none), in one session;
    every answer, and the rows the table has after them."""

    async def scenario() -> list[Answer]:
        async with proxy.stdio() as session:
            return [
                answer_of(await session.call_tool("write_query", INSERT, meta=_meta(bid)))
                for bid in business_object_ids
            ]

    sql(world, "CREATE TABLE orders (id INTEGER PRIMARY KEY, cart TEXT)")
    answers = asyncio.run(scenario())
    ((rows,),) = sql(world, "SELECT count(*) FROM orders")
    return answers, rows


@pytest.fixture
def world(tmp_path: Path, sqlite_server: Path) -> World:
    return World(tmp_path, Shim(tmp_path), sqlite_server)


def test_identical_inserts_under_two_business_ids_are_two_actions(
    live_server, ledger_token: str, world: World
) -> None:
    proxy = Proxy(live_server, ledger_token, world, "sqlite")
    answers, rows = _inserting(proxy, world, ["order-1", "order-2", "order-1"])
    assert rows == 2 and len(world.shim.calls("write_query")) == 2
    assert [(a.is_error, a.ledger["replayed"]) for a in answers] == [
        (False, False),
        (False, False),
        (False, True),  # order-1 again: the same action, answered from its record
    ]
    first, second, again = (a.ledger["idempotency_key"] for a in answers)
    assert first == again != second and first.endswith(":order-1")


def test_identical_inserts_under_no_business_id_are_one_action(
    live_server, ledger_token: str, world: World
) -> None:
    proxy = Proxy(live_server, ledger_token, world, "sqlite")
    answers, rows = _inserting(proxy, world, [None, None])
    assert rows == 1 and len(world.shim.calls("write_query")) == 1
    assert [a.ledger["replayed"] for a in answers] == [False, True]


def test_a_business_id_that_is_not_text_is_refused_and_nothing_runs(
    live_server, ledger_token: str, world: World
) -> None:
    proxy = Proxy(live_server, ledger_token, world, "sqlite")
    answers, rows = _inserting(proxy, world, [42])
    assert rows == 0 and world.shim.calls("write_query") == []
    (answer,) = answers
    assert answer.protocol_error is None and answer.is_error, answer
    assert answer.code == "INVALID_INPUT" and BUSINESS_OBJECT_META_KEY in answer.text


def test_a_business_id_the_ledger_refuses_is_a_tool_result_and_nothing_runs(
    live_server, ledger_token: str, world: World
) -> None:
    proxy = Proxy(live_server, ledger_token, world, "sqlite")
    answers, rows = _inserting(proxy, world, ["x" * 201])
    assert rows == 0 and world.shim.calls("write_query") == []
    (answer,) = answers
    assert answer.protocol_error is None and answer.is_error, answer
    assert answer.code == "INVALID_INPUT" and "at most 200 characters" in answer.text


def test_the_documented_request_is_a_new_action_under_its_business_id(
    live_server, ledger_token: str, world: World
) -> None:
    """The guide's request, sent as written after the same INSERT under another business id:
    a second row; sent again, the same action."""
    params = _documented_request()["params"]
    assert (params["name"], params["arguments"]) == ("write_query", INSERT)
    (documented,) = params["_meta"].values()
    proxy = Proxy(live_server, ledger_token, world, "sqlite")
    answers, rows = _inserting(proxy, world, ["order-1001", documented, documented])
    assert set(params["_meta"]) == {BUSINESS_OBJECT_META_KEY}
    assert rows == 2 and [a.ledger["replayed"] for a in answers] == [False, False, True]
