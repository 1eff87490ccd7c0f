import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
application = get_asgi_application()

from console.startup import freeze_loaded_objects  # noqa: E402 - needs the settings above

freeze_loaded_objects()
