"""A Django orders service on agent_ledger_downstream, run by the tests as a real process.
It answers the same routes as the sandbox billing service, so one set of tests covers both."""

import os
from urllib.parse import unquote

import environ

SECRET_KEY = "test-only-django-service-secret-0123456789abcdef"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "agent_ledger_downstream.django",
    "tests.downstream.django_service",
]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "tests.downstream.django_service.urls"
DATABASES = {"default": environ.Env.db_url_config(os.environ["SERVICE_DATABASE_URL"])}
# A Unix socket's folder comes percent-encoded as the URL's host (the embedded PostgreSQL).
DATABASES["default"]["HOST"] = unquote(DATABASES["default"].get("HOST") or "")
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
