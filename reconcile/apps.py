from typing import Any

from django.apps import AppConfig


class ReconcileConfig(AppConfig):
    name = "reconcile"
    verbose_name = "Reconciliation"

    def ready(self) -> None:
        from ledger.signals import records_became_unknown
        from reconcile.tasks import enqueue_reconciliation

        def on_unknown(sender: Any, record_ids: list[int], **kwargs: Any) -> None:
            enqueue_reconciliation(record_ids)

        records_became_unknown.connect(
            on_unknown, weak=False, dispatch_uid="reconcile.enqueue_on_unknown"
        )
