"""Production URLs plus the framework floor (a minimal view doing one INSERT)."""

from django.urls import path

from bench.floor import floor_view
from console.urls import handler404, handler500
from console.urls import urlpatterns as production_urlpatterns

urlpatterns = [path("bench/floor", floor_view), *production_urlpatterns]

__all__ = ["handler404", "handler500", "urlpatterns"]
