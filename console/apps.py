from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Operator console"

    def ready(self) -> None:
        from console import language  # noqa: F401 - connects the sign-in receiver
