"""The exactly-once pipeline canary: a Java consume-transform-produce worker (``EosWorker.java``),
compiled once at setup against the kafka-clients jar Vigil already resolves, run and watched from
Python (:mod:`monitor.eos.worker`), and audited against the real topics (:mod:`monitor.eos.audit`)
with the rules of :mod:`invariants.eos`."""
