from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.generic import RedirectView

from ledger.api import api
from ledger.prometheus import metrics_view


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness probe for load balancers; touches nothing."""
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
]

handler404 = "console.errors.not_found"
handler500 = "console.errors.server_error"
