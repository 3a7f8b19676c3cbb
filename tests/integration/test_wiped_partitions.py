"""A broker that comes back without a topic's data: one node's canary partition directories are
wiped while it is stopped (only those: every local node is also a controller, its metadata log
stays), then it is started again under running writers. RF 1, so nothing else holds the data. A
transactional writer runs too: its transactions lose their records on the wiped partitions and
keep them on the others. So does the EOS pipeline canary, its worker paused across the rewrite:
its committed offset inside the new log, it goes on from there, and the new records below it were
never its to copy."""

from __future__ import annotations

import json
import shutil
import signal
import time
from concurrent.futures import ThreadPoolExecutor

from monitor.chaos.verdict import vanished_beyond_audit
from monitor.clients import admin, describe_topic
from tests.integration.helpers import vigil_json
from tests.integration.watch_helpers import (
    G0, HISTORY, Background, audit_counts, final_counts, high_watermark, metrics_up, nonzero, sample, scrape,
    signal_eos_worker, signal_group_members, violations, wait_for, watch_config, writers_writing,
)

ISOS = ("read_committed", "read_uncommitted")


def test_a_node_back_without_its_canary_partitions_loses_every_acked_write_they_held(cluster_ready, tmp_path):
    cluster = cluster_ready["cluster"]
    cfg, path = watch_config(
        cluster_ready, tmp_path, "wiped", 29479,
        canary={"replication_factor": 1, "min_insync_replicas": 1, "partitions": 3},
        ledger={"checkpoint_interval_s": 5},
        eos={"enabled": True, "output_topic": "it-wiped-eos-out", "group": "vigil-it-wiped-eos"},
        writers=[{"name": "idempotent", "rate": 150},
                 {"name": "txn", "transactional": True, "rate": 40, "transaction": {"size": 3}}])
    port = cfg.metrics.port
    client = admin(cfg)
    run = Background(path, "run", "--json", name="run")
    try:
        wait_for(lambda: metrics_up(port), 120, "the first batch")
        wait_for(lambda: writers_writing(port, cfg, acked=600, committed=30), 120, "history in every partition")
        info = describe_topic(client, cfg.canary.name)
        node = info.leaders[0]
        wiped = sorted(p for p, leader in info.leaders.items() if leader == node)
        listed_at = time.monotonic()
        old_end = {p: high_watermark(cfg, p) for p in wiped}
        cluster.stop_node(node)
        # the group's members paused until the new logs have grown past the old ends: then they are
        # assigned again (past their session timeout) and start at their committed offsets, inside
        # the new logs (an offset without a leader epoch is not validated): the new records below
        # are never theirs, and the commits acknowledged before the rewrite passed the old log
        # there. With the members running, whether their next fetch found the new log short of
        # their position (a reset) was a race
        assert signal_group_members(run, signal.SIGSTOP) == cfg.groups.members
        # the EOS worker too: it then goes on from its committed offset inside the new log (the case
        # where the new records below it were never its to copy: 262 false eos_loss in the audit in a
        # fresh-clone suite, 5 live in a scratch run); running, it mostly found the new log short of
        # its position and started again at its start (1,265 false eos_duplicate before copies named
        # their record; both cases 0 and 0 since, README)
        assert signal_eos_worker(run, signal.SIGSTOP) == 1
        # what the partitions held when stopped: at most the writers' rates more per second since
        per_partition = sum(w.rate for w in cfg.writers) / len(info.leaders)
        old_end = {p: end + int(per_partition * (time.monotonic() - listed_at + 2)) for p, end in old_end.items()}
        stopped_at = time.monotonic()
        for p in wiped:
            shutil.rmtree(cluster.node_dir(node) / "data" / f"{cfg.canary.name}-{p}")
        # down long enough that a transaction caught by the stop holds the other partitions' LSO far
        # longer than the threshold (6 s): the prober lists every 2-4 s and the audit times the
        # ledger's acknowledgements, so a hang within a listing interval of the threshold may be
        # counted by one side only (measured: ~8 s down, the audit counted 2, live 0)
        time.sleep(max(0.0, 16 - (time.monotonic() - stopped_at)))
        cluster.start_node(node)
        cluster.wait_ready(90)
        wait_for(lambda: all(violations(port)[("lost_write", iso)] > 0 for iso in ISOS), 120,
                 "the wiped writes judged lost")
        # the restarted logs grow past every offset the wiped ones had: each acked write there
        # can be judged (read again, or known missing)
        settle = cfg.watch.settle_offsets
        wait_for(lambda: all(high_watermark(cfg, p) > old_end[p] + settle + 5 for p in wiped), 180,
                 "the writers to carry on past the old ends", show=lambda: (old_end, {p: high_watermark(cfg, p)
                                                                                    for p in wiped}))
        rebalances = group_rebalances(port)
        signal_group_members(run, signal.SIGCONT)
        signal_eos_worker(run, signal.SIGCONT)
        wait_for(lambda: group_rebalances(port) > rebalances, 90, "the members back in the group")
        wait_for(lambda: all(sample(port, "vigil_unseen_writes", isolation=iso) == 0 for iso in ISOS), 90,
                 "the checker to catch up")
        time.sleep(5)
    finally:
        signal_group_members(run, signal.SIGCONT)
        signal_eos_worker(run, signal.SIGCONT)
        assert run.stop() == 0, run.tail()
    everything = final_counts(run)
    live = {k: n for k, n in everything.items() if k[0] in HISTORY}
    report = vigil_json(path, "audit")
    audit = nonzero(audit_counts(report))
    final_log = dict(audit)  # what the final logs show (before what only live saw is added below)
    # acked writes read at their offset and gone from it later, where the final log does not reach
    # past their settle window (the restarted log has not grown back that far): live saw them read,
    # the audit leaves them undecided — matched write by write, as `vigil chaos` does
    evidence = [json.loads(line) for line in cfg.evidence_path().read_text().splitlines()]
    for (inv, iso, _d), n in vanished_beyond_audit(evidence, report["undecided_writes"]).items():
        audit[(inv, iso)] = audit.get((inv, iso), 0) + n
    # every acknowledged write the wiped partitions held is gone: lost in both readers, and the
    # audit (which reads only the final log) finds the same writes missing
    assert live[("lost_write", "read_committed")] == audit[("lost_write", "read_committed")] > 0, report["undecided"]
    assert live[("lost_write", "read_uncommitted")] == audit[("lost_write", "read_uncommitted")] > 0, report["undecided"]
    lost = report["examples"]["lost_write/read_uncommitted"]
    assert {e["partition"] for e in lost} <= set(wiped)
    # whatever Kafka does with the reused offsets, live and audit agree on what the final log
    # shows; what only re-reads can see (an offset read with one record, now holding another) is
    # live-only and recorded in the evidence (lso_stuck, a liveness verdict the audit recomputes, is
    # held below)
    # write cycles are judged on the order read: live read the emptied partition's new log at reused
    # offsets only where it read again, the audit reads it whole (measured: live 0, audit 5 — see
    # invariants/write_cycles.py, "Logs that change"); recorded, not compared here
    cycles = {"live": live.pop(G0, 0), "audit": audit.pop(G0, 0)}
    print(f"write cycles on the rewritten log: {cycles}")
    for key, n in audit.items():
        if key[0] in HISTORY:
            assert live.get(key) == n, (key, live, audit)
    for key, n in live.items():
        if key[0] != "inconsistent_offset":
            assert audit.get(key) == n, (key, live, audit)
    # transactions whose records vanished on the wiped partitions are torn, live and in the audit
    # (live once it read the rewritten offsets again: before that it remembered the old log there)
    assert live[("partial_txn", "read_committed")] == audit[("partial_txn", "read_committed")] > 0
    # a transaction held the LSO only where its records stayed in the log and the log grew past
    # them; where they vanished it held none, live or in the audit
    lso = ("lso_stuck", "read_committed")
    assert everything.get(lso, 0) == audit.get(lso, 0), (everything, audit)
    # the group: the writers saw each wiped partition's rewrite begin (the commits acknowledged
    # before it passed the old log only, also above its last acknowledged write: judged against the
    # new log's records at those offsets they made 140 false group_skip in the audit, 9 live, in a
    # stop-30 preview); group_skip and group_rewind are compared above with the rest of the history
    groups = report["groups"]
    print(f"group: skip live {live.get(('group_skip', 'read_committed'), 0)}, audit {groups['group_skip']}; "
          f"offset resets {groups['offset_resets']}; rewrites began {groups['rewrites_began']}")
    assert set(groups["rewrites_began"]) == {str(p) for p in wiped}, groups["rewrites_began"]
    # the EOS pipeline went on from its committed offset inside the new log: the new records below
    # were never its, on neither side (eos_loss and eos_duplicate live == audit compared above)
    eos = vigil_json(path, "eos", "audit")
    print(f"eos: {eos['reused_positions']} positions copied from both logs, not consumed {eos['not_consumed']}; "
          f"duplicates live "
          f"{live.get(('eos_duplicate', 'read_committed'), 0)}, audit {eos['eos_duplicate']}; losses live "
          f"{live.get(('eos_loss', 'read_committed'), 0)}, audit {eos['eos_loss']}")
    assert any(hi > lo for lo, hi in eos["not_consumed"].values()), eos  # the fault did reach the pipeline
    assert eos["eos_duplicate"] == eos["eos_loss"] == 0, eos
    assert live.get(("eos_duplicate", "read_committed"), 0) == live.get(("eos_loss", "read_committed"), 0) == 0

    # the same history read again from its start by two more watches, as catch-ups: batches cut short
    # (1,500 and 500 offsets per source), the ledger fetched ahead of the readers. One holds it beside the
    # state (invariants/ledger_hold.py, a 5 s lead); the other applies it whole as it comes (an
    # unbounded lead: what the monitor did before the hold). The hold changes no verdict on the
    # canary's history, and expires no acknowledgement.
    # The group canary's skips too: before a skip's wait for the ledger started at the skipped
    # record's own intent (Checker._intent_unread), both catch-ups counted 18-26 group_skip the audit
    # does not find (the new log's records read long before the ledger reached their time, the wait
    # outlasted before the acknowledgements showing the offsets reused came). Both read only the final logs, as the audit does, and count what it counts
    # but for a known gap: a reader that starts on a log that begins with what it never returns (a
    # wiped partition's new log may begin with a marker) counts a write acknowledged there expired
    # (below its first read) or, at offset 0, zero_offset, where the audit (bounded by the log start)
    # finds it lost — at most one per wiped partition and reader. Write cycles are judged on the order
    # read (compared above for the live run: recorded only)
    # (the two side by side, each with its own state and port: about 20 s less of the suite)
    with ThreadPoolExecutor(2) as pool:
        # (the held one in batches of 500 offsets per source, the other 1,500: another split, the same
        # verdicts. How much this history holds varies from run to run: its ledger is about three
        # quarters of the canary's offsets, and the wiped partition's new log, all late records, is
        # read from the first batch on and carries the hold's threshold ahead (rows held after 13 of
        # 32 batches in one run; another run's topics, read again in batches of 1,500, after none of
        # 8). So the kill -9 while rows are held has a history built for it:
        # tests/integration/test_ledger_hold.py)
        held_run = pool.submit(catch_up, cluster_ready, tmp_path, "held", 29481, lead_s=5, max_offsets=500)
        whole_run = pool.submit(catch_up, cluster_ready, tmp_path, "whole", 29482, lead_s=10**9)
        (held, held_expired, held_peak), (whole, whole_expired, whole_peak) = held_run.result(), whole_run.result()
    assert whole_peak == 0  # (an unbounded lead holds nothing)
    print(f"catch-up: held {held}, expired {held_expired}, rows held at most {held_peak}; "
          f"whole {whole}, expired {whole_expired}; "
          f"the final logs {final_log}")
    history = {k: n for k, n in held.items() if k[0] in CANARY_HISTORY}
    assert history == {k: n for k, n in whole.items() if k[0] in CANARY_HISTORY}
    assert held_expired == whole_expired  # (no acknowledgement expired by the hold)
    skip = ("group_skip", "read_committed")
    assert held.get(skip, 0) == whole.get(skip, 0) == final_log.get(skip, 0), (held, whole, final_log)
    assert final_log.get(("lost_write", "read_uncommitted"), 0) > 0
    gaps = 0
    expected = {k: n for k, n in final_log.items() if k[0] in CANARY_HISTORY}
    for iso in ISOS:
        gap = final_log.get(("lost_write", iso), 0) - held.get(("lost_write", iso), 0)
        assert 0 <= gap <= len(wiped), (iso, held, final_log)
        zero = held.get(("zero_offset", iso), 0) - final_log.get(("zero_offset", iso), 0)
        assert 0 <= zero <= gap, (iso, held, final_log)
        gaps += gap - zero
        expected[("lost_write", iso)] -= gap
        if zero:
            expected[("zero_offset", iso)] = expected.get(("zero_offset", iso), 0) + zero
    assert gaps <= held_expired.get("below_first_read", 0), (gaps, held_expired)
    assert history == {k: n for k, n in expected.items() if n}, (held, final_log)


CANARY_HISTORY = ("lost_write", "duplicate", "reorder", "zero_offset", "offset_mismatch", "inconsistent_offset",
                  "aborted_read", "partial_txn", "outcome_gap")


def catch_up(cluster_ready, tmp_path, name: str, port: int, lead_s: float, max_offsets: int = 1500
             ) -> tuple[dict, dict, int]:
    """A watch over the test's topics with a state of its own, from their start, to their end
    (``--until-caught-up``): its counts, the acknowledgements it left unjudged, by reason, and the
    most ledger rows it held."""
    tmp = tmp_path / f"catch-up-{name}"
    tmp.mkdir()
    cfg, path = watch_config(cluster_ready, tmp, "wiped", port,
                             canary={"replication_factor": 1, "min_insync_replicas": 1, "partitions": 3},
                             watch={"max_offsets_per_trigger": max_offsets, "ledger_lead_s": lead_s})
    watch = Background(path, "watch", "--until-caught-up", "--json", name=f"catch-up-{name}")
    try:
        assert watch.proc.wait(420) == 0, watch.tail()
    finally:
        watch.stop()
    assert not any((cfg.checkpoint_dir() / "ledger-held").glob("*.arrow"))  # everything applied by the end
    found = watch.stdout_json()["checker"]
    return (nonzero(final_counts(watch)), {k: v for k, v in found["expired_unread"].items() if v},
            found["ledger_held_peak"])


def group_rebalances(port: int) -> float:
    return sum(v for (name, _labels), v in scrape(port).items() if name == "vigil_group_rebalances_total")

