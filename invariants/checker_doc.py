"""The checker's durable form: an explicit, versioned JSON document (never a pickle of private
fields), saved by the watch after every batch. A document of another version is refused with a
message naming both versions."""

from __future__ import annotations

from typing import Any

from invariants.accounting import LedgerFold
from invariants.acked_writes import AckedWritesFamily
from invariants.attribution import TopicAttribution
from invariants.catalog import Invariant, Isolation
from invariants.eos import EosFinding, EosLive
from invariants.reference_confirm import FindingsToConfirm
from invariants.groups import GroupFinding, GroupJudge
from invariants.ledger_format import TopicSettings, WriterSettings
from invariants.model import Durability, Settings, ViewKey, Violation
from invariants.offset_set import OffsetSet
from invariants.offsets import OffsetsFamily
from invariants.promises import ClassTable, SaveClassTable
from invariants.read_index import PartitionView
from invariants.sequence import SequenceFamily
from invariants.transactions import TransactionsFamily
from invariants.unconfirmed import UnconfirmedFamily
from invariants.write_cycles import WriteCyclesFamily

DOC_VERSION = 4


def to_doc(ck: Any) -> dict[str, Any]:
    t = SaveClassTable()
    body = {
        "counts": [[inv.value, iso.value, d.value, n] for (inv, iso, d), n in ck.sink.counts.items()],
        "lost_by_writer": [[w, iso.value, d.value, cause, n]
                           for (w, iso, d, cause), n in ck.sink.lost_by_writer.items()],
        "counted_before": [[Violation.identity_doc(ident), n] for ident, n in ck.sink.counted_before.items()],
        "records_checked": {iso.value: n for iso, n in ck.records_checked.items()},
        "old_log_reads": {iso.value: n for iso, n in ck.old_log_reads.items()},
        "filled_reads": {iso.value: n for iso, n in ck.filled_reads.items()},
        "fill_left_out": {iso.value: n for iso, n in ck.fill_left_out.items()},
        "log_start": [[tid, p, off] for (tid, p), off in ck.log_start.items()],
        "views": [[key.to_doc(), v.to_doc()] for key, v in ck.views.items()],
        "dirty": [key.to_doc() for key in ck._dirty],
        "suspects": [[key.to_doc(), ranges] for key, ranges in ck.suspects.items() if ranges],
        "max_acked": [[*k, off] for k, off in ck.max_acked.items()],
        "rewrites": [[tid, p, s.to_runs()] for (tid, p), s in ck.rewrites.items() if s],
        "rewriting": [list(k) for k in sorted(ck.rewriting)],
        "rewrite_marks": [[tid, p, [list(m) for m in marks]] for (tid, p), marks in ck.rewrite_marks.items() if marks],
        "writer_classes": [[wid, inc, t.ref(c)] for (wid, inc), c in ck.writer_classes.items()],
        "topic_settings": [[tid, s.replication_factor, s.min_insync_replicas, s.unclean_leader_election]
                           for tid, s in ck.topic_settings.items()],
        "writer_info": [[w.name, w.role, w.acks, w.idempotence, w.transactional, w.message_timeout_ms]
                        for w in ck.writer_info.values()],
        "fold": ck.fold.to_doc(),
        "acked": ck.acked.to_doc(t),
        "sequence": ck.sequence.to_doc(),
        "offsets": ck.offsets.to_doc(),
        "txns": ck.txns.to_doc(t),
        "unconfirmed": ck.unconfirmed.to_doc(),
        "cycles": ck.cycles.to_doc(),
        "eos": {"source": ck.eos_source, "topic_id": ck.eos_topic_id, "live": ck.eos.to_doc(),
                "losses_to_confirm": ck.eos_losses.to_doc()},
        "groups": {"source": ck.group_source, "topic_id": ck.group_topic_id, "judge": ck.groups.to_doc(),
                   "skips_to_confirm": ck.group_skips.to_doc()},
        "topics": ck.topics.to_doc(),
        "recorded_log_start": [[tid, p, off] for (tid, p), off in ck.recorded_log_start.items()],
        "current_ids": ck.current_ids,
        "ending": ck._ending,
    }
    return {"version": DOC_VERSION, "classes": t.to_doc(), **body}


def from_doc(ck: Any, doc: dict[str, Any], settings: Settings) -> Any:
    """``ck``: a new checker, filled from ``doc``."""
    if doc.get("version") != DOC_VERSION:
        raise ValueError(f"checker state version {doc.get('version')!r}, this code reads {DOC_VERSION}")
    t = ClassTable.from_doc(doc["classes"])
    for inv, iso, d, n in doc["counts"]:
        ck.sink.counts[(Invariant(inv), Isolation(iso), Durability(d))] = n
    for w, iso, d, cause, n in doc["lost_by_writer"]:
        ck.sink.lost_by_writer[(w, Isolation(iso), Durability(d), cause)] = n
    for ident, n in doc.get("counted_before", ()):  # absent before rebuilds existed: none
        ck.sink.counted_before[Violation.identity_from_doc(ident)] = n
    ck.records_checked = {Isolation(k): n for k, n in doc["records_checked"].items()}
    ck.old_log_reads = {Isolation(k): n for k, n in doc.get("old_log_reads", {}).items()}  # absent before
    ck.filled_reads = {Isolation(k): n for k, n in doc.get("filled_reads", {}).items()}  # absent before
    ck.fill_left_out = {Isolation(k): n for k, n in doc.get("fill_left_out", {}).items()}
    ck.log_start = {(tid, p): off for tid, p, off in doc["log_start"]}
    ck.views = {ViewKey.from_doc(k): PartitionView.from_doc(v) for k, v in doc["views"]}
    ck._dirty = {ViewKey.from_doc(k) for k in doc["dirty"]}
    ck.suspects = {ViewKey.from_doc(k): ranges for k, ranges in doc["suspects"]}
    ck.max_acked = {tuple(row[:4]): row[4] for row in doc["max_acked"]}
    ck.rewrites = {(tid, p): OffsetSet.from_runs(runs) for tid, p, runs in doc.get("rewrites", [])}  # (absent before)
    ck.rewriting = {tuple(k) for k in doc.get("rewriting", [])}  # (absent before)
    ck.rewrite_marks = {(tid, p): [(int(t), int(o)) for t, o in marks] for tid, p, marks in doc.get("rewrite_marks", [])}
    ck.writer_classes = {(wid, inc): t.get(i) for wid, inc, i in doc["writer_classes"]}
    ck.topic_settings = {tid: TopicSettings(rf, isr, unclean) for tid, rf, isr, unclean in doc["topic_settings"]}
    ck.writer_info = {row[0]: WriterSettings(*row) for row in doc["writer_info"]}
    ck.fold = LedgerFold.from_doc(doc["fold"])
    ck.acked = AckedWritesFamily.from_doc(doc["acked"], settings.settle_offsets, t)
    ck.sequence = SequenceFamily.from_doc(doc["sequence"], ck.class_of)
    ck.offsets = OffsetsFamily.from_doc(doc["offsets"], ck.class_of)
    ck.txns = TransactionsFamily.from_doc(doc["txns"], settings.horizon_offsets, t)
    ck.unconfirmed = UnconfirmedFamily.from_doc(doc["unconfirmed"], settings.settle_offsets)
    ck.cycles = WriteCyclesFamily.from_doc(doc.get("cycles"))  # absent before write cycles were judged
    eos = doc.get("eos") or {}  # absent before EOS pipelines were judged
    ck.eos_source, ck.eos_topic_id = eos.get("source", ""), eos.get("topic_id", "")
    ck.eos = EosLive.from_doc(eos["live"]) if "live" in eos else EosLive(settings.horizon_offsets)
    ck.eos_losses = FindingsToConfirm.from_doc(EosFinding, "eos_loss", eos.get("losses_to_confirm"))  # absent before: none
    groups = doc.get("groups") or {}  # absent before the group canary was judged
    ck.group_source, ck.group_topic_id = groups.get("source", ""), groups.get("topic_id", "")
    ck.groups = GroupJudge.from_doc(groups["judge"]) if "judge" in groups else GroupJudge()
    ck.group_skips = FindingsToConfirm.from_doc(GroupFinding, "group_skip", groups.get("skips_to_confirm"))  # absent before: none
    ck.topics = TopicAttribution.from_doc(doc["topics"])
    ck.recorded_log_start = {(tid, p): off for tid, p, off in doc["recorded_log_start"]}
    ck.current_ids = dict(doc["current_ids"])
    ck._ending = dict(doc["ending"])
    return ck
