from django.apps import AppConfig


class DownstreamConfig(AppConfig):
    name = "agent_ledger_downstream.django"
    label = "agent_ledger_downstream"
    verbose_name = "Idempotency keys"
    default_auto_field = "django.db.models.BigAutoField"
