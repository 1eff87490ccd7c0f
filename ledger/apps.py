from django.apps import AppConfig


class LedgerConfig(AppConfig):
    name = "ledger"
    verbose_name = "Ledger"

    def ready(self) -> None:
        """Export traces when the ``OTEL_*`` variables ask for it, and check each new database
        connection's replication when it must be synchronous (web and worker processes)."""
        from ledger import replication, tracing

        tracing.configure()
        replication.watch_connections()
