import os

from django.urls import include, path

from agent_ledger_downstream.django.views import lookup_urls, token_check
from tests.downstream.django_service import views

urlpatterns = [
    path("invoices", views.create_invoice),
    path("invoices/stats", views.stats),
    path("healthz", views.healthz),
    path("", include(lookup_urls(check=token_check(os.environ["LOOKUP_TOKEN"])))),
]
