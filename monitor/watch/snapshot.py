"""What the watch exports, computed from its durable state and the prober's last view."""

from __future__ import annotations

import time

from invariants.model import RC, Durability
from monitor.metrics import WatchSnapshot
from monitor.watch.prober import ProbeView
from monitor.watch.state import WatchState


def build_snapshot(st: WatchState, view: ProbeView, *, unseen_after_s: float, last_progress: dict,
                   last_batch: float, up: bool, state_bytes: int, batch_seconds: dict | None = None,
                   save_failures: dict | None = None, trigger_seconds: dict | None = None,
                   triggers: int = 0) -> WatchSnapshot:
    ck = st.checker
    violations = dict(ck.counts)
    for (inv, iso), n in st.liveness.items():  # liveness is about availability, not what a setting allows
        violations[(inv, iso, Durability.GUARANTEED)] = violations.get((inv, iso, Durability.GUARANTEED), 0) + n
    lag, progress = {}, {}
    for key, frontier in ck.frontiers().items():
        if key.topic_id != view.topic_id:
            continue
        ends = view.ends.get(key.partition)
        if ends is not None:
            end = ends.lso if key.iso is RC else ends.high_watermark
            lag[(key.iso, key.partition)] = max(0, end - frontier)
        if key in last_progress:
            progress[(key.iso, key.partition)] = last_progress[key]
    led = {b: 0 for b in view.brokers}
    for leader in view.leaders.values():
        if leader >= 0:
            led[leader] = led.get(leader, 0) + 1
    return WatchSnapshot(
        violations=violations, records_checked=dict(ck.records_checked), expired_unread=ck.expired_by_reason,
        malformed=dict(st.malformed), aborted_allowed=ck.aborted_allowed,
        unseen=ck.unseen(view.broker_now_us(time.time()), unseen_after_s),
        e2e_counts={k: v.tolist() for k, v in st.e2e_counts.items()}, e2e_sum=dict(st.e2e_sum),
        lag=lag, last_progress=progress, last_batch=last_batch, up=int(up),
        restarts=st.restarts, led=led, stalls_open=dict(view.open_stalls), state_bytes=state_bytes,
        ledger_held=st.ledger_hold.held(),
        batch_seconds=dict(batch_seconds or {}), trigger_seconds=dict(trigger_seconds or {}), triggers=triggers,
        batches=st.batches, lost_by_writer=dict(ck.sink.lost_by_writer),
        rewrites={p: ck.offsets.rewrites.get((view.topic_id, p), 0) for p in range(view.partitions)},
        unconfirmed_missing=dict(ck.unconfirmed.missing),
        writers=sorted((w.name, w.acks, w.idempotence, w.transactional) for w in ck.writer_info.values()),
        refetches=st.refetches, old_log_reads=dict(ck.old_log_reads),
        filled_reads=dict(ck.filled_reads), fill_left_out=dict(ck.fill_left_out),
        list_offsets_failures=view.list_offsets_failures,
        topics=topic_states(ck, view.topic_id), clock_skew=dict(view.clock_skew),
        save_failures=dict(save_failures or {}), ledger_reachable=int(view.ledger_reachable),
        ledger_placement=view.ledger_placement,
        group_redeliveries=ck.groups.redeliveries, group_rebalances=dict(ck.groups.rebalances),
        group_fetching=dict(ck.groups.fetching), group_resets=ck.groups.resets,
        group_observations_lost=ck.groups.observations_lost, group_recreations=ck.groups.recreations,
    )


def topic_states(ck, current: str) -> dict[str, tuple[str, str]]:
    """Every topic ID the checker knows: its name and whether it is current, known, or gone (and why)."""
    out = {}
    for name, ids in ck.topics.ids.items():
        for tid in ids:
            state = ck.topics.gone.get(tid) or ("current" if tid == current else "known")
            out[tid] = (name, state)
    return out
