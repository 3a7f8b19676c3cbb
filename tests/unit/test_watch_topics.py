"""The topic directory is asked from two threads (the batch and the re-fetcher): one admin client,
one lookup at a time, the others answered from its cache."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from monitor.config import parse
from monitor.watch import topics


def test_fresh_id_from_several_threads_makes_one_client_and_one_lookup(monkeypatch):
    made, asked = [], []

    def admin(_cfg):
        time.sleep(0.1)  # a client takes a while to make: wide open to a race without the lock
        made.append(1)
        return object()

    def describe(_admin, name, timeout):
        time.sleep(0.1)
        asked.append(name)
        return SimpleNamespace(topic_id="tid-1")

    monkeypatch.setattr(topics.clients, "admin", admin)
    monkeypatch.setattr(topics.clients, "describe_topic", describe)
    directory = topics.TopicDirectory(parse({}, "t.yaml"), prober=None)
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(directory.fresh_id("canary"))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == ["tid-1"] * 4 and len(made) == 1 and asked == ["canary"]
