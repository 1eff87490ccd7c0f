from typing import Any

from django.apps import AppConfig


class ReconcileConfig(AppConfig):
    name = "reconcile"
    verbose_name = "Reconciliation"

    def ready(self) -> None:
        # The ledger never imports this app; it learns what this app provides here.
        from ledger.api import api
        from ledger.classification.files import register_workspace_roots
        from ledger.services.lookup_coverage import register_lookup_check
        from ledger.signals import records_became_unknown
        from reconcile.api import router as compensations_router
        from reconcile.coverage import cannot_look_up
        from reconcile.models import WorkspaceRoot
        from reconcile.tasks import enqueue_reconciliation

        def on_unknown(sender: Any, record_ids: list[int], **kwargs: Any) -> None:
            enqueue_reconciliation(record_ids)

        records_became_unknown.connect(
            on_unknown, weak=False, dispatch_uid="reconcile.enqueue_on_unknown"
        )
        register_workspace_roots(WorkspaceRoot.paths_of)
        register_lookup_check(cannot_look_up)
        # Compensations are run by this app's workers; their endpoints join the ledger's API.
        api.add_router("/compensations", compensations_router)
