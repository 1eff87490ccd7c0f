"""A duplicate answered from its record as the first call's statement read it, without the
row lock: ``wait`` or the recorded result, the whole of a retry storm, in one statement and
no transaction. The answer holds only while the record still has every value it depends on,
which the statement that counts the duplicate checks on the row it locks."""

from __future__ import annotations

from functools import cache

from django.db import connection

from ledger.domain import Decision, ReplayPolicy
from ledger.models import IdempotencyRecord, LedgerEntry
from ledger.records.lease import lapsed_sql
from ledger.records.reserve import Reservation, count_duplicate_sql, state_table_answer
from ledger.sql.statements import insert_parts, model_field, quote, run_precompiled

# The answers a duplicate may be given from its record as read without the lock: neither
# starts an execution nor changes the record (``answer_as_seen``).
_ANSWERED_AS_SEEN = frozenset({Decision.WAIT, Decision.RECORDED_RESULT})
# What the state table's answer depends on: the record must still have these values when the
# duplicate is counted (``count_duplicate_as_seen``). State and fencing token alone would do:
# every transition changes the state, except a replay, which takes a new fencing token, and a
# token settles once, so the result, the error and its code cannot change without one of them.
# The lease also moves with heartbeats; the others are cheap insurance. The fingerprint never
# changes.
_ANSWER_DEPENDS_ON = (
    "state",
    "fencing_token",
    "lease_expires_at",
    "requires_approval",
    "error_retryable",
    "completed_at",
)


def answer_as_seen(
    seen: IdempotencyRecord, *, fingerprint: str, replay_policy: ReplayPolicy, lapsed: bool
) -> Reservation | None:
    """The answer to a duplicate from its record as read without the lock (``reserve_new_key``
    read it), when that answer neither starts an execution nor changes the record: ``wait``
    or ``recorded_result`` (DESIGN section 3), the whole of a retry storm. None for every
    other answer (an execution to grant, a lease gone silent, a conflict to audit, an approval
    to ask for): those are given under the record's lock by ``reserve_key``. The answer holds
    only if the record has not changed since: ``count_duplicate_as_seen`` checks that.
    ``lapsed``: whether the statement that read it found its lease lapsed (the database's
    clock)."""
    if lapsed:
        return None  # the holder went silent: the locked way marks the record unknown
    answer = state_table_answer(seen, fingerprint, replay_policy)
    if answer.reexecute or answer.decision not in _ANSWERED_AS_SEEN:
        return None
    return Reservation(seen, False, answer.decision, answer.code, answer.next_action)


def count_duplicate_as_seen(seen: IdempotencyRecord, entry: LedgerEntry) -> bool:
    """Count a duplicate of ``seen`` and write its ``entry`` (unsaved) in one statement, only
    if the record still has every value its answer depends on (``_ANSWER_DEPENDS_ON``): the
    ``UPDATE`` re-checks them on the row it locks, so the answer given is the state table's
    answer at that moment, as under ``reserve_key``'s lock. False, writing nothing, when the
    record has changed or gone since it was read, or when its lease has lapsed by now (the
    locked way would mark it unknown): the locked way answers then."""
    entry_columns, entry_values, entry_params = insert_parts(
        entry, expressions={"record_id": ("counted.id", [])}
    )
    params = [IdempotencyRecord._meta.pk.get_db_prep_value(seen.pk, connection)]
    for name in _ANSWER_DEPENDS_ON:
        field = model_field(IdempotencyRecord, name)
        params.append(field.get_db_prep_value(getattr(seen, field.attname), connection))
    # Identifiers come from the models' metadata, values are parameters: nothing from input.
    sql = (
        f"WITH counted AS ({_count_duplicate_as_seen_sql()}) "  # noqa: S608
        f"INSERT INTO {quote(LedgerEntry._meta.db_table)} ({entry_columns}) "
        f"SELECT {entry_values} FROM counted RETURNING {quote(str(LedgerEntry._meta.pk.column))}"
    )
    row, _count = run_precompiled(sql, [*params, *entry_params])
    if row is None:
        return False
    entry.pk = row[0]
    entry._state.adding = False
    seen.duplicate_hits += 1
    return True


@cache
def _count_duplicate_as_seen_sql() -> str:
    """``count_duplicate_sql``, only while the record is as seen and its lease has not lapsed."""

    def column(name: str) -> str:
        return quote(str(model_field(IdempotencyRecord, name).column))

    unchanged = " AND ".join(f"{column(n)} IS NOT DISTINCT FROM %s" for n in _ANSWER_DEPENDS_ON)
    lapsed = lapsed_sql(quote(IdempotencyRecord._meta.db_table))
    return (
        f"{count_duplicate_sql()} AND {unchanged} AND NOT {lapsed} RETURNING {column('pk')} AS id"
    )
