"""Chaos days: scenarios as data (:mod:`monitor.chaos.scenario`), shipped in ``scenarios/``."""
