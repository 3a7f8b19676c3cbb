"""The EOS pipeline's audit: its verdict (:func:`invariants.eos.eos_verdict`) from the real topics.

In the order the rule needs: the group's committed offsets first; then the output's high
watermarks; then the output read with ``read_committed`` until the reader's position passes those
watermarks; then the source read with ``read_committed`` past its last stable offsets as they are
then, the reader's position kept as how far it is whole. Not the output's end as ``read_committed`` sees it (its last stable offset):
a transaction's commit markers are written partition by partition, so the group's offsets can be
visible while an output partition's marker is not yet — an audit stopping there would call that
transaction's records lost. Its records are below any high watermark taken after its offsets
were visible (the worker sends with acks=all and flushes before it commits).

An output topic whose log start moved (retention) no longer holds the copies of the oldest source
records: on such a partition the source is judged only from the lowest source offset a surviving
copy names. A rewritten source partition is judged but where the pipeline did not consume the new
log (:func:`invariants.eos.rewritten_span`, from the records the source holds now and those the
copies name).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from invariants.eos import EosVerdict, eos_verdict
from invariants.model import foreign_ident
from monitor import clients, record_format
from monitor.audit.reader import AuditReadError, committed_offsets, read_committed_now, read_past
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
    drill_copies: int = 0  # output records flagged as a drill's deliberate copy


def ensure_output_topic(cfg: Config, partitions: int) -> None:
    """The output topic, created like the canary topic but never with unclean leader election (a
    copy it lost would be a false loss); an existing one must have the source's partitions (the
    worker writes source partition p's copies to output partition p)."""
    admin = clients.admin(cfg)
    configs = {**cfg.canary.topic_configs(), "unclean.leader.election.enable": "false"}
    info = clients.ensure_topic(admin, cfg.eos.output_topic, partitions, cfg.canary.replication_factor, configs)
    if info.partitions < partitions:
        raise AuditReadError(f"eos.output_topic {cfg.eos.output_topic!r} has {info.partitions} partitions, the canary "
                             f"topic {partitions}: the worker writes partition p's copies to partition p (add "
                             "partitions to it, or name a new output topic)")


def audit(cfg: Config, source_topic: str, output_topic: str, group: str, timeout_s: float = 300.0,
          progress: Callable[[str], None] = lambda _m: None) -> EosAudit:
    admin = clients.admin(cfg)
    infos = {t: clients.describe_topic(admin, t) for t in (source_topic, output_topic)}
    for name, info in infos.items():
        if info is None:
            raise AuditReadError(f"EOS audit: topic {name!r} does not exist or could not be described")
    n_src, n_out = infos[source_topic].partitions, infos[output_topic].partitions
    committed = committed_offsets(cfg, group, source_topic, n_src)
    output: list[tuple] = []  # (source partition, source offset, the source record's identity or None)
    malformed = drill_copies = 0
    lowest: dict[int, int] = {}  # source partition -> lowest source offset a copy names

    def on_output(msg: Any) -> None:
        nonlocal malformed, drill_copies
        copy = output_format.decode_copy(msg.value())
        if copy is None:
            malformed += 1
            return
        output.append(copy)
        drill_copies += output_format.is_drill_copy(msg.value())
        lowest[copy[0]] = min(lowest.get(copy[0], copy[1]), copy[1])

    # high watermarks: librdkafka lists offsets at the client's isolation level (read_committed: the LSO)
    hw = clients.consumer(cfg, "read_uncommitted", group="vigil-audit")
    try:
        marks = {q: clients.watermarks(hw, output_topic, q) for q in range(n_out)}
    finally:
        hw.close()
    c = clients.consumer(cfg, "read_committed", group="vigil-audit", profile="bulk")
    try:
        read_past(c, output_topic, {q: high for q, (_low, high) in marks.items()}, timeout_s, on_output)
    finally:
        c.close()
    # Copies gone with the output's retention: judged only from the oldest copy left.
    judge_from = {q: lowest.get(q, committed.get(q, 0)) for q, (low, _high) in marks.items() if low > 0}
    held: dict[int, dict[int, tuple]] = {}  # partition -> offset read, in order -> the record's identity

    def on_source(msg: Any) -> None:
        rec = record_format.decode(msg.value())
        held.setdefault(msg.partition(), {})[msg.offset()] = (
            (rec.writer_id, rec.incarnation, rec.seq) if isinstance(rec, record_format.CanaryRecord)
            else foreign_ident(msg.value()))

    c = clients.consumer(cfg, "read_committed", group="vigil-audit", profile="bulk")
    try:
        read_to = read_committed_now(c, source_topic, n_src, timeout_s, on_source)
    finally:
        c.close()
    verdict = eos_verdict(held, read_to, committed, output, judge_from, held)
    spans = verdict.not_consumed
    judged = sum(1 for p, offsets in held.items() for o in offsets
                 if judge_from.get(p, 0) <= o < verdict.judged.get(p, 0)
                 and not (p in spans and spans[p][0] <= o < spans[p][1]))
    return EosAudit(verdict, committed, len(output), malformed, sum(map(len, held.values())), judged, drill_copies)
