"""The group canary's audit: :class:`invariants.groups.GroupJudge` fed the whole observation log,
then the canary topic as ``read_committed`` reads it now.

The observation log is read first, to its high watermark (its writers are idempotent, not
transactional); the canary after it, past its last stable offsets as they are then
(:func:`monitor.audit.reader.read_committed_now`): every commit the log names passed only
records below those.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from invariants.groups import GroupFinding, GroupJudge
from invariants.ledger_format import LedgerEntry
from invariants.offset_set import OffsetSet
from invariants.promises import topic_ids_of
from monitor import clients
from monitor.audit.reader import AuditReadError, read_committed_now, read_past
from monitor.config import Config
from monitor.group import observations


@dataclass
class GroupAudit:
    findings: list[GroupFinding]
    counts: Counter  # invariant -> count
    observations: int
    malformed: int
    foreign: int  # observations of another canary topic (one observation topic given to two instances)
    drills: list[dict[str, Any]]  # the drills the members applied, as they reported them
    redeliveries: int
    rebalances: Counter  # (member, reason) -> count
    reference_records: int
    resets: int  # positions the members reported out of range
    observations_lost: int  # gaps in the observation log
    judged_records: int  # of those, passed by an acknowledged commit and judged
    recreated: bool = False  # the canary topic was recreated within the history: group_skip not judged
    # partition -> [(ms, offset)]: where the writers saw a rewrite begin (commits acknowledged before
    # passed the old log: invariants.groups.GroupJudge.rewritten)
    rewrites_began: dict[int, list[tuple[int, int]]] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """As `vigil group audit --json` prints it (and `vigil audit --json` under ``groups``)."""
        return {"group_skip": self.counts["group_skip"], "group_rewind": self.counts["group_rewind"],
                "rebalance_stall": self.counts["rebalance_stall"], "redeliveries": self.redeliveries,
                "observations": self.observations, "malformed_observations": self.malformed,
                "foreign_observations": self.foreign,
                "reference_records": self.reference_records, "judged_records": self.judged_records,
                "offset_resets": self.resets, "observations_lost": self.observations_lost,
                "canary_recreated": self.recreated,
                "rewrites_began": {str(p): [list(m) for m in began] for p, began in sorted(self.rewrites_began.items())},
                "rebalances": {f"{m}:{reason}": n for (m, reason), n in sorted(self.rebalances.items())},
                "drills": self.drills[:100],
                "findings": [[f.invariant, f.partition, f.offset, f.member] for f in self.findings[:100]]}


def canary_recreated(entries: Iterable[LedgerEntry], name: str, topic_id_now: str | None) -> bool:
    """Whether the ledger shows the canary topic ``name`` recreated (more than one topic ID, the
    current one counted): its group's audit then judges no ``group_skip``."""
    return len(topic_ids_of(entries, name) | ({topic_id_now} if topic_id_now else set())) > 1


def reused_offsets(reused: Mapping[tuple[str, int], OffsetSet], topic_id_now: str | None) -> dict[int, OffsetSet]:
    """Of the offsets a rewrite reused per (topic ID, partition), as the ledger's writers'
    acknowledgements show them (:attr:`monitor.audit.book.LedgerBook.reused`), those of the canary
    topic as it is now, per partition: no ``group_skip`` is judged there, as live."""
    return {p: offsets for (tid, p), offsets in reused.items() if tid == topic_id_now}


def rewrite_marks_of(marks: Mapping[tuple[str, int], list[tuple[int, int]]],
                     topic_id_now: str | None) -> dict[int, list[tuple[int, int]]]:
    """Of where the writers saw each rewrite begin per (topic ID, partition), as (ms, offset)
    (:attr:`monitor.audit.book.LedgerBook.rewrite_marks`), those of the canary topic as it is now:
    a commit acknowledged before passed the old log (:meth:`invariants.groups.GroupJudge.rewritten`)."""
    return {p: list(m) for (tid, p), m in marks.items() if tid == topic_id_now}


def ensure_observation_topic(cfg: Config) -> None:
    """One partition: its offsets order every member's observations."""
    admin = clients.admin(cfg)
    configs = {"min.insync.replicas": str(cfg.canary.min_insync_replicas), "unclean.leader.election.enable": "false"}
    clients.ensure_topic(admin, cfg.groups.observation_topic, 1, cfg.canary.replication_factor, configs)


def read_observations(cfg: Config, topic: str, canary_topic: str | None, timeout_s: float = 300.0) -> observations.InOrder:
    """Every observation in log order, as (offset, observation; a malformed one, or one of a canary
    topic other than ``canary_topic``, as {}), and how many were malformed and foreign."""
    records: list[tuple[int, bytes | None]] = []
    c = clients.consumer(cfg, "read_uncommitted", group="vigil-audit", profile="bulk")
    try:
        _low, high = clients.watermarks(c, topic, 0)
        read_past(c, topic, {0: high}, timeout_s, lambda msg: records.append((msg.offset(), msg.value())))
    finally:
        c.close()
    return observations.in_order(records, canary_topic)


def audit(cfg: Config, topic: str, obs_topic: str, stall_ms: int, timeout_s: float = 300.0,
          recreated: bool = False, reused: Mapping[int, OffsetSet] | None = None,
          marks: Mapping[int, list[tuple[int, int]]] | None = None) -> GroupAudit:
    """``recreated``: the canary topic was recreated under its name within the history (the
    ledger knows more than one ID for it): ``group_skip`` is not judged
    (:meth:`invariants.groups.GroupJudge.recreated`). ``reused``: per partition, offsets a
    rewrite reused (:func:`reused_offsets`), where it is not judged either; ``marks``: per partition,
    where each rewrite began (:func:`rewrite_marks_of`): nor below what a commit acknowledged before
    passed."""
    admin = clients.admin(cfg)
    info = clients.describe_topic(admin, topic)
    if info is None or clients.describe_topic(admin, obs_topic) is None:
        raise AuditReadError(f"group audit: topic {topic!r} or {obs_topic!r} does not exist or could not be described")
    judge = GroupJudge(stall_ms=stall_ms)
    if recreated:
        judge.recreated()
    for p, offsets in (reused or {}).items():
        for first, count in offsets.to_runs():
            judge.rewritten(p, first, first + count)
    for p, began in (marks or {}).items():
        for since, lo in began:
            judge.rewritten(p, lo, lo, since_ms=since)
    log = read_observations(cfg, obs_topic, topic, timeout_s)
    seen = log.seen
    for at, obs in seen:
        judge.observe(at, obs)
    reference = 0  # records read_committed read

    def on(msg: Any) -> None:
        nonlocal reference
        reference += 1
        judge.read_reference(msg.partition(), [msg.offset()])

    c = clients.consumer(cfg, "read_committed", group="vigil-audit", profile="bulk")
    try:
        for p, at in read_committed_now(c, topic, info.partitions, timeout_s, on).items():
            judge.read_reference(p, [], reader_at=at)
    finally:
        c.close()
    findings = judge.judge(dict(enumerate(clients.log_starts(admin, info))))
    return GroupAudit(findings, Counter(f.invariant for f in findings), len(seen), log.malformed, log.foreign,
                      [obs for _at, obs in seen if obs.get("k") == "drill"], judge.redeliveries, judge.rebalances,
                      reference, judge.resets, judge.observations_lost, judge.judged_records, recreated,
                      {p: list(began) for p, began in (marks or {}).items() if began})
