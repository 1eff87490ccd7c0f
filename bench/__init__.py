"""``make bench``: the hot path beside its floors, contention, console at scale, reconciliation
throughput, cleanup and memory, against PostgreSQL and Redis with the production server.

Run ``python -m bench [--quick]`` (the Makefile sets the environment); results are printed as a
table and written to ``var/bench.json``. See docs/performance.md.
"""
