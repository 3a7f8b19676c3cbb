"""Pure checking logic: plain Python over small histories and state.

Nothing in this package opens a Kafka client, a Spark session or a metric. The catalog of
invariant names lives in :mod:`invariants.catalog`; the ledger's wire format in
:mod:`invariants.ledger_format`; one module per anomaly family holds its spec (the module
docstring), its state and its verdicts (``acked_writes``, ``sequence``, ``offsets``,
``transactions``, ``liveness``, ``accounting``); :mod:`invariants.checker` keeps the shared
per-partition index (:mod:`invariants.read_index`) and dispatches to the families.
"""
