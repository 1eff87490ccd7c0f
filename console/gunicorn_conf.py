"""The web server's settings, read by gunicorn, never by Django: the production command is
``gunicorn -c python:console.gunicorn_conf console.wsgi:application`` and nothing more
(the image's default command, docs/deploy.md). An option given on the command line overrides
the one here."""

import os

bind = ["0.0.0.0:8000"]
# Sync workers, 2 x cores + 1 (``make bench``, docs/performance.md): the cores this process may
# run on, which a container's CPU set limits. WEB_CONCURRENCY overrides it, as it does
# gunicorn's own default.
workers = int(os.environ.get("WEB_CONCURRENCY") or 2 * len(os.sched_getaffinity(0)) + 1)
# gunicorn's default, spelled out because the ledger's own bound depends on it: a request's
# whole time on the database (DATABASE_REQUEST_BUDGET_MS, 20 s) stays below it, so a request
# is answered 503 before its worker would be killed. Raise both together.
timeout = 30
graceful_timeout = 10

accesslog = "-"
# The access log names each request by its path alone (``%(U)s``): the request line
# (``%(r)s``) and the query string (``%(q)s``) carry idempotency keys, which hold user and
# business ids (``GET /api/v1/records?key=...``), and a look-up's token; the referrer
# (``%(f)s``) carries a console page's filters, keys among them. Otherwise gunicorn's default.
access_log_format = '%(h)s %(l)s %(u)s %(t)s "%(m)s %(U)s %(H)s" %(s)s %(b)s "%(a)s"'
