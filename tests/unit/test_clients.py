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
