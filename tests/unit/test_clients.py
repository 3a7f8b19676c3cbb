"""Client helpers that need no broker."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from monitor import clients


class MovingLeader:
    """A consumer whose watermark calls fail with the given errors first, then answer."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.calls = 0

    def get_watermark_offsets(self, tp, timeout):
        self.calls += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return (3, 42)


def test_watermarks_are_asked_again_while_leadership_moves(monkeypatch):
    monkeypatch.setattr(clients.time, "sleep", lambda s: None)
    c = MovingLeader(KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
    assert clients.watermarks(c, "t", 0) == (3, 42)
    assert c.calls == 3


def test_watermarks_raise_other_errors_at_once():
    c = MovingLeader(KafkaError.UNKNOWN_TOPIC_OR_PART)
    with pytest.raises(KafkaException):
        clients.watermarks(c, "t", 0)
    assert c.calls == 1


def test_watermarks_give_up_after_their_budget(monkeypatch):
    monkeypatch.setattr(clients.time, "sleep", lambda s: None)
    c = MovingLeader(*[KafkaError.NOT_LEADER_FOR_PARTITION] * 1000)
    with pytest.raises(KafkaException):
        clients.watermarks(c, "t", 0, within_s=0.0)
    assert c.calls == 1


class ControllerAway:
    """An admin client whose DescribeTopics fails with the given errors first, then answers."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.calls = 0

    def describe_topics(self, topics, request_timeout):
        from concurrent.futures import Future
        from types import SimpleNamespace as NS

        self.calls += 1
        f: Future = Future()
        if self.errors:
            f.set_exception(KafkaException(KafkaError(self.errors.pop(0))))
        else:
            node = NS(id=2)
            f.set_result(NS(partitions=[NS(id=0, leader=node, replicas=[node, NS(id=1)], isr=[node])]))
        return {"t": f}


def test_describe_partitions_is_asked_again_while_the_controller_it_knew_is_away(monkeypatch):
    # "Failed while waiting for controller: Local: Timed out" after a kill -9 of that node
    monkeypatch.setattr(clients.time, "sleep", lambda s: None)
    c = ControllerAway(KafkaError._TIMED_OUT, KafkaError._TRANSPORT)
    assert clients.describe_partitions(c, "t", within_s=60.0) == {0: clients.PartitionView(2, (2, 1), (2,))}
    assert c.calls == 3


def test_describe_partitions_asks_once_by_default_and_raises_other_errors_at_once(monkeypatch):
    monkeypatch.setattr(clients.time, "sleep", lambda s: None)
    with pytest.raises(KafkaException):
        clients.describe_partitions(ControllerAway(KafkaError._TIMED_OUT), "t")
    c = ControllerAway(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        clients.describe_partitions(c, "t", within_s=60.0)
    assert c.calls == 1
