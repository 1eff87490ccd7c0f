"""Production URLs plus the floors beneath the hot path (``bench.floor``)."""

from django.urls import path

from bench.floor import floor_view, sql_floor_calls, sql_floor_complete
from console.urls import handler404, handler500
from console.urls import urlpatterns as production_urlpatterns

urlpatterns = [
    path("bench/floor", floor_view),
    path("bench/sql-floor/calls", sql_floor_calls),
    path("bench/sql-floor/complete", sql_floor_complete),
    *production_urlpatterns,
]

__all__ = ["handler404", "handler500", "urlpatterns"]
