"""The SQL layer, under every other part of the ledger: ``statements`` builds the SQL of the hot
path and the state changes from the models' metadata (identifiers from metadata, values as
parameters), and ``raw_cursor`` is the one place that reaches into Django's database wrapper."""
