from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Operator console"

    def ready(self) -> None:
        from django.contrib import admin

        # Imported for what they register: sign-in receivers and the demo-password deploy check.
        from console import demo, preferences, sessions, signin  # noqa: F401
        from ledger.admin import audit_every_admin

        audit_every_admin(admin.site)  # the admin registered every app's pages before this
