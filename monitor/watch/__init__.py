"""``vigil watch``: the live checker — Spark sources, the checker adapter, prober, exporter."""
