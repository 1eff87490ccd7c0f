from typing import Any

from django.apps import AppConfig


class ReconcileConfig(AppConfig):
    name = "reconcile"
    verbose_name = "Reconciliation"

    def ready(self) -> None:
        # The ledger never imports this app: it signals calls that became unknown, and this app's
        # workers look them up.
        from ledger.signals import records_became_unknown
        from reconcile.tasks import enqueue_reconciliation

        def on_unknown(sender: Any, record_ids: list[int], **kwargs: Any) -> None:
            enqueue_reconciliation(record_ids)

        records_became_unknown.connect(
            on_unknown, weak=False, dispatch_uid="reconcile.enqueue_on_unknown"
        )
