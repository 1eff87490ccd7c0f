"""The reasons the shell and SQL classifiers give for one call are stored in English (the API
answers with them) and read in Chinese on the call's page, the command and names filled in.

A reason is a frame (``SQL: %(reason)s``; a command in backticks and a colon) around the
classifier's own words. A template that starts like those words (``%(kind)s is not a read-only
statement.``) matches the whole text too: the frame is still what is read, its colon in Chinese."""

# The Chinese is written with Chinese punctuation (full-width colons and commas).
# ruff: noqa: RUF001

from __future__ import annotations

import pytest

from console.models import Preferences
from ledger.classification.arguments import DecidingArgument
from ledger.domain import PerCall
from tests.api.conftest import client_for
from tests.console.conftest import make_user, signed_in
from tests.factories import make_tool

CALLS = [
    # (tool, input, the English stored, the Chinese shown)
    (
        "run_command",
        {"command": "rm -rf build"},
        "`rm -rf build`: deletes files.",
        "`rm -rf build`：删除文件。",
    ),
    (
        "run_command",
        {"command": "git push --force"},
        "`git push --force`: `git push` discards work or history.",
        "`git push --force`：`git push` 会丢弃工作或历史。",
    ),
    (
        "run_command",
        {"command": "f() { rm x; }"},
        "`f() { rm x; }`: shell construct 'function' is not understood. It mentions a "
        "destructive program, so it is flagged destructive.",
        "`f() { rm x; }`：无法理解 shell 结构“function”。 其中提到了具有破坏性的程序，"
        "因此被标记为破坏性。",
    ),
    (
        "warehouse_sql",
        {"q": "DELETE FROM orders"},
        "SQL: Delete is not a read-only statement.",
        "SQL：Delete 不是只读语句。",
    ),
    (
        "warehouse_sql",
        {"q": "SELECT nextval(1)"},
        "SQL: nextval() has side effects.",
        "SQL：nextval() 有副作用。",
    ),
    # A reason with a reason inside (what may be user-defined), each translated.
    (
        "warehouse_sql",
        {"q": "SELECT 1::money_amount"},
        "SQL: a cast to a type that may be user-defined runs a function.",
        "SQL：类型转换可能由用户定义，会调用函数。",
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("tool", "tool_input", "english", "chinese"), CALLS)
def test_a_commands_and_a_statements_reasons_read_in_chinese(
    django_user_model, tenant, tool, tool_input, english, chinese
) -> None:
    make_tool(tenant, "warehouse_sql", code_argument=DecidingArgument(PerCall.SQL, "q"))
    api = client_for(tenant)
    api.start_run()
    call = api.call(tool, tool_input).json()
    assert call["classification"]["reason"] == english

    user = make_user(django_user_model, "li", tenant, "operator")
    Preferences.objects.create(user=user, language="zh-hans")
    page = signed_in(user).get(f"/ledger/calls/{call['call_id']}/", secure=True, follow=True)
    html = page.content.decode()
    assert page.status_code == 200
    assert chinese in html and english not in html
