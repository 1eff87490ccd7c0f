"""The framework floor: the least a Django request through the same server can cost with one
INSERT. Served only by ``bench.urls``."""

from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

FLOOR_TABLE_SQL = (
    "CREATE TABLE IF NOT EXISTS bench_floor ("
    "id bigserial PRIMARY KEY, key text NOT NULL UNIQUE, created_at timestamptz DEFAULT now())"
)


@csrf_exempt
def floor_view(request: HttpRequest) -> JsonResponse:
    """One INSERT with the key from the body; nothing else."""
    key = request.body.decode() or "missing"
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO bench_floor (key) VALUES (%s) RETURNING id", [key])
        row = cursor.fetchone()
    return JsonResponse({"id": row[0] if row else None})
