"""Pure checking logic: plain Python over small histories and state.

Nothing in this package opens a Kafka client, a Spark session or a metric. The catalog of
invariant names lives in :mod:`invariants.catalog`; the checker modules (one per anomaly
family) are added by the live-checker issue.
"""
