"""Failure drills: seed 000's eval cases and seed 001's acceptance, regression
groups and failure drills, run against the whole stack as separate processes, with the
evidence written to ``var/drill.json``. ``make drill`` runs them."""
