from django.apps import AppConfig


class LedgerConfig(AppConfig):
    name = "ledger"
    verbose_name = "Ledger"

    def ready(self) -> None:
        """Export traces when the ``OTEL_*`` variables ask for it (web and worker processes)."""
        from ledger import tracing

        tracing.configure()
