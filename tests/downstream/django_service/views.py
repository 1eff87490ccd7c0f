from __future__ import annotations

import json
import os
import secrets
import time

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET, require_POST

from agent_ledger_downstream.django.views import idempotent
from tests.downstream.django_service.models import Invoice


def _gateway_caller(request: HttpRequest) -> str:
    """The caller the gateway in front of this service authenticated."""
    return request.headers.get("X-Caller", "")


@require_POST
@idempotent(scope=_gateway_caller)
def create_invoice(request: HttpRequest) -> HttpResponse:
    try:
        data = json.loads(request.body)
        customer, amount = str(data["customer"]), int(data["amount_cents"])
    except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: nested too deep
        return JsonResponse({"detail": "customer and amount_cents are required"}, status=422)
    if not customer or amount <= 0:
        return JsonResponse({"detail": "customer and amount_cents are required"}, status=422)
    invoice = Invoice.objects.create(customer=customer, amount_cents=amount)
    fault = request.headers.get("X-Fault", "")
    if fault == "exit-before-commit":
        os._exit(17)
    if fault == "exit-after-commit":
        transaction.on_commit(lambda: os._exit(17))
    if fault == "commit-early":
        transaction.commit()
    if fault == "hold":
        time.sleep(float(request.headers.get("X-Fault-Seconds", "0.5")))
    body = {
        "id": invoice.pk,
        "customer": customer,
        "amount_cents": amount,
        "portal_token": secrets.token_urlsafe(16),
    }
    return JsonResponse(body, status=201)


@require_GET
def stats(request: HttpRequest) -> HttpResponse:
    invoices = Invoice.objects.all()
    customer = request.GET.get("customer", "")
    if customer:
        invoices = invoices.filter(customer=customer)
    return JsonResponse({"invoices": invoices.count(), "customer": customer})


def healthz(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"status": "ok"})
