"""Sandbox downstreams for tests, drills and the demo: see ``sandbox.server``."""
