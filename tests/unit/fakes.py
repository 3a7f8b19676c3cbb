"""A fake producer for unit tests: records calls, delivers on poll/flush with scripted results."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass
class FakeMessage:
    _topic: str
    _partition: int
    _value: bytes
    _offset: int
    _key: bytes | None = None

    def value(self) -> bytes:
        return self._value

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def topic(self) -> str:
        return self._topic

    def key(self) -> bytes | None:
        return self._key


class FakeProducer:
    """Appends to in-memory partitions; ``fail`` decides an error per message (None = ok)."""

    def __init__(self, log: dict[tuple[str, int], list[bytes]] | None = None,
                 fail: Callable[[str, int, bytes], Any] | None = None, acks: str = "all") -> None:
        self.log = log if log is not None else {}
        self.fail = fail
        self.acks = acks
        self.queue: list[tuple[str, int, bytes, bytes | None, Callable | None]] = []
        self.calls: list[str] = []

    def produce(self, topic, value=None, key=None, partition=0, on_delivery=None):
        self.calls.append(f"produce:{topic}")
        self.queue.append((topic, partition, value, key, on_delivery))

    def _deliver(self) -> int:
        n = 0
        while self.queue:
            topic, partition, value, key, cb = self.queue.pop(0)
            err = self.fail(topic, partition, value) if self.fail else None
            offset = -1
            if err is None:
                part = self.log.setdefault((topic, partition), [])
                offset = len(part)
                part.append(value)
                offset = -1 if self.acks == "0" else self.reported_offset(partition, offset)
            if cb is not None:
                cb(err, FakeMessage(topic, partition, value, offset, key))
            n += 1
        return n

    def reported_offset(self, partition: int, offset: int) -> int:
        """The offset the acknowledgement names (a lying broker's fake overrides this)."""
        return offset

    def poll(self, timeout=0):
        return self._deliver()

    def flush(self, timeout=None):
        self.calls.append("flush")
        self._deliver()
        return 0

    def __len__(self):
        return len(self.queue)
