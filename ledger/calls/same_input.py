"""A replay or an approved start runs the recorded action's exact input (DESIGN section 5): the
runtime names the input it will run, and another one (another fingerprint) is refused before
anything is written, so an approval given for ``amount=10`` never runs ``amount=9999``."""

from __future__ import annotations

from typing import Any

from ledger.calls.values import Caller
from ledger.errors import InputMismatch, InvalidInput
from ledger.keys import fingerprint
from ledger.models import AuditEvent, IdempotencyRecord, LedgerEntry
from ledger.services.audit import audit


def refuse_other_input(
    *, caller: Caller, entry: LedgerEntry, record: IdempotencyRecord, tool_input: Any, step: str
) -> None:
    """Raise ``InputMismatch`` (422 ``IDEMPOTENCY_KEY_CONFLICT``), audited as a denial, when
    ``tool_input`` is not the input of ``record``'s action; ``step`` names what was refused
    (``replay``, ``start``)."""
    try:
        given = fingerprint(tool_input)
    except ValueError as exc:
        raise InvalidInput(f"input cannot be fingerprinted: {exc}") from None
    if given == record.fingerprint:
        return
    audit(
        tenant=record.tenant_id,
        actor=caller.identity,
        action=f"call.{step}_refused",
        target=entry,
        source=AuditEvent.Source.API,
        outcome=AuditEvent.Result.DENIED,
        after={"fingerprint": given, "recorded": record.fingerprint},
        detail="the input differs from the recorded action's",
    )
    raise InputMismatch(
        f"a {step} runs the recorded action's exact input; this input differs from it "
        f"(fingerprint {given[:12]}…, recorded {record.fingerprint[:12]}…). Another input is "
        "another action: call it under a new step or business object."
    )
