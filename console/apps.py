from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Operator console"

    def ready(self) -> None:
        # Imported for what they register: sign-in receivers and the demo-password deploy check.
        from console import demo, language, signin  # noqa: F401
