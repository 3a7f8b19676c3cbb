"""The EOS pipeline's audit: its verdict (:func:`invariants.eos.eos_verdict`) from the real topics.

In the order the rule needs: the group's committed offsets first, then the output read with
``read_committed`` to its end (every output a committed offset covers is below that end), then the
source read with ``read_committed`` to its end, each reader's position kept as how far it is whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from confluent_kafka import TopicPartition

from invariants.eos import EosVerdict, eos_verdict
from monitor import clients
from monitor.audit.reader import AuditReadError, read_to_end
from monitor.config import Config
from monitor.eos import output_format


@dataclass(frozen=True)
class EosAudit:
    verdict: EosVerdict
    committed: dict[int, int]
    output_records: int
    malformed_output: int
    source_records: int  # what read_committed read of the source
    judged_records: int  # of those, below the committed offsets


def committed_offsets(cfg: Config, group: str, topic: str, partitions: int, timeout_s: float = 30.0) -> dict[int, int]:
    """The group's committed offsets on ``topic`` (partitions without one are left out). A
    consumer that never subscribes does not join the group: asking disturbs nothing."""
    c = clients.consumer(cfg, "read_committed", group=group)
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=timeout_s)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got if tp.offset >= 0}


def _positions(consumer: Any, topic: str, partitions: int) -> dict[int, int]:
    return {tp.partition: tp.offset for tp in consumer.position([TopicPartition(topic, p) for p in range(partitions)])
            if tp.offset >= 0}


def audit(cfg: Config, source_topic: str, output_topic: str, group: str, timeout_s: float = 300.0,
          progress: Callable[[str], None] = lambda _m: None) -> EosAudit:
    admin = clients.admin(cfg)
    infos = {t: clients.describe_topic(admin, t) for t in (source_topic, output_topic)}
    for name, info in infos.items():
        if info is None:
            raise AuditReadError(f"EOS audit: topic {name!r} does not exist or could not be described")
    n_src, n_out = infos[source_topic].partitions, infos[output_topic].partitions
    committed = committed_offsets(cfg, group, source_topic, n_src)
    output: list[tuple[int, int]] = []
    malformed = 0

    def on_output(msg: Any) -> None:
        nonlocal malformed
        position = output_format.decode(msg.value())
        if position is None:
            malformed += 1
        else:
            output.append(position)

    c = clients.consumer(cfg, "read_committed", group="vigil-audit", profile="bulk")
    try:
        read_to_end(c, output_topic, n_out, timeout_s, on_output, progress)
    finally:
        c.close()
    source: dict[int, list[int]] = {}
    c = clients.consumer(cfg, "read_committed", group="vigil-audit", profile="bulk")
    try:
        read_to_end(c, source_topic, n_src, timeout_s,
                    lambda msg: source.setdefault(msg.partition(), []).append(msg.offset()), progress)
        read_to = _positions(c, source_topic, n_src)
    finally:
        c.close()
    verdict = eos_verdict(source, read_to, committed, output)
    judged = sum(1 for p, offsets in source.items() for o in offsets if o < verdict.judged.get(p, 0))
    return EosAudit(verdict, committed, len(output), malformed, sum(map(len, source.values())), judged)
