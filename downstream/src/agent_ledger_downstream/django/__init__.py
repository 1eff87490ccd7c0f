"""Django: the ``@idempotent`` view decorator, the look-up URLs and retention.

Add ``"agent_ledger_downstream.django"`` to ``INSTALLED_APPS`` and migrate; then import from
``agent_ledger_downstream.django.views`` (this module imports no models, so Django can load it
while the app registry is being populated).
"""
