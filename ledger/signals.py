"""Signals the ledger sends; other apps react without the ledger knowing them."""

from django.dispatch import Signal

#: Sent inside the transaction that made records ``unknown``; ``record_ids`` is a list of ids.
#: The reconcile app enqueues a look-up for each once that transaction commits.
records_became_unknown = Signal()
