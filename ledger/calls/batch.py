"""The tool calls of one model turn decided together (``POST /calls/batch``): each exactly as
``record_call`` decides it alone, in the order given, for less.

A run and tool are looked up once a batch, and consecutive calls whose keys are new and may be
taken at once (``record.takes_key_at_once``) are reserved in one statement
(``records.reserve_new_keys``): a turn's calls of registered tools cost the token, one look-up
and one statement. Every other call (a write plan, a policy asking first, a catalogue tool's
first use, a key taken already, a second call of one action in the batch, a bad input) is
decided by ``record_call`` itself, in its place. Keys are never repeated within one statement,
so a call of an action the batch has already reserved is answered as its retry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial

from django.db import DatabaseError

from ledger.approval_policies import PolicySpec
from ledger.calls import entries
from ledger.calls.record import (
    call_of,
    executing,
    first_call_rows,
    record_call,
    takes_key_at_once,
)
from ledger.calls.selectors import run_and_tool
from ledger.calls.values import Caller, CallInput, CallResult
from ledger.errors import LedgerError
from ledger.models import Run, Tool
from ledger.records import reserve_new_keys
from ledger.services.runs import RunHalted

Refusal = LedgerError | RunHalted
# How the caller decides one call: runs the decision it is handed (inside a trace span, say).
Decide = Callable[[Callable[[], CallResult]], CallResult]
_Found = tuple[Run, Tool | None, list[PolicySpec]] | None


def record_calls(
    *, caller: Caller, requests: Sequence[CallInput], decide: Decide
) -> Iterator[CallResult | Refusal | DatabaseError]:
    """Each call's answer, in order: its result, or the refusal it would have had alone. Store
    trouble (a ``DatabaseError``) is the answer of the call that met it and of every call after
    it, which is not tried; a call reserved in the same statement as others before the trouble
    keeps its answer (its lease is the runtime's)."""
    batch = _Batch(caller, decide)
    group: list[tuple[CallInput, entries.NewCall]] = []
    for request in requests:
        call = batch.takes_key_at_once(request)
        if call is None or any(call.key == taken.key for _request, taken in group):
            yield from batch.reserve(group)
            group = []
        if call is None:
            yield batch.alone(request)
        else:
            group.append((request, call))
    yield from batch.reserve(group)


class _Batch:
    """One batch's look-ups and whether its store is in trouble."""

    def __init__(self, caller: Caller, decide: Decide) -> None:
        self.caller = caller
        self.decide = decide
        self.found: dict[tuple[str, str], _Found] = {}
        self.trouble: DatabaseError | None = None

    def takes_key_at_once(self, request: CallInput) -> entries.NewCall | None:
        """The call as the ledger records it when it may take its key at once; else None, and
        it is decided alone (which refuses it the same way when it is refused)."""
        if request.write_plan is not None or self.trouble is not None:
            return None
        where = (request.run_id, request.tool)
        try:
            if where not in self.found:
                self.found[where] = run_and_tool(self.caller.tenant, request.run_id, request.tool)
            if (looked_up := self.found[where]) is None:
                return None
            run, tool, policies = looked_up
            if tool is None:  # a catalogue tool's first use registers it: look it up again
                del self.found[where]
                return None
            call = call_of(self.caller, run, tool, request)
        except LedgerError:  # refused: refused again, alone
            self.found.setdefault(where, None)
            return None
        except DatabaseError:  # the store: met again by the calls before it, or by this one
            return None
        return call if takes_key_at_once(run, policies, request, call) else None

    def reserve(
        self, group: list[tuple[CallInput, entries.NewCall]]
    ) -> Iterator[CallResult | Refusal | DatabaseError]:
        """The answers of ``group``'s calls, whose keys differ, reserved in one statement; a
        call whose key was taken already is then decided alone, as its duplicate."""
        if not group:
            return
        rows = [first_call_rows(call) for _request, call in group]
        try:
            if self.trouble is not None:
                raise self.trouble
            created = reserve_new_keys([(record, event, entry) for entry, record, event in rows])
        except LedgerError as exc:  # the caller's deadline passed: nothing was reserved
            yield from [exc] * len(group)
            return
        except DatabaseError as exc:  # nothing was reserved
            self.trouble = exc
            yield from [exc] * len(group)
            return
        for (request, call), (entry, _record, _event), record in zip(
            group, rows, created, strict=True
        ):
            if record is None:
                yield self.alone(request)
            else:
                yield self.decide(partial(executing, call, entry))

    def alone(self, request: CallInput) -> CallResult | Refusal | DatabaseError:
        """``record_call``'s answer, unless the store is in trouble: then it is not tried."""
        if self.trouble is not None:
            return self.trouble
        try:
            return self.decide(partial(record_call, caller=self.caller, request=request))
        except (LedgerError, RunHalted) as exc:
            return exc
        except DatabaseError as exc:
            self.trouble = exc
            return exc
