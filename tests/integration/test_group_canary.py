"""The consumer-group canary against the real cluster. Classic protocol: members killed -9 and
restarted with static membership cause no rebalance in the others, without it they do; a member
restarted in a follower's rack fetches from that follower (KIP-392); a member paused past its
session timeout loses its partitions (a stall on them, its late commit refused); through all of
it nothing is skipped or rewound, and each drill is found exactly. The consumer protocol (KIP-848):
the fencing of a static member back within its session."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

from monitor import clients
from monitor.cluster.layout import rack_of
from monitor.group.audit import audit, ensure_observation_topic, read_observations
from monitor.group.runner import GroupCanary
from tests.integration.helpers import write_source_with_aborts

PARTITIONS = 3
SESSION_MS = 6000  # the brokers' group.min.session.timeout.ms


def _rebalances(observations: list[tuple[int, dict]], members: set[str], after: int, before: int) -> dict:
    """Per member, the rebalances librdkafka counted between two points of the observation log."""
    counts = {}
    for m in members:
        rcs = [int(o.get("rc", 0)) for at, o in observations
               if after <= at < before and o.get("m") == m and o.get("k") == "progress"]
        assert rcs, f"no progress from {m} in the window"
        counts[m] = max(rcs) - min(rcs)
    return counts


def _observed(cfg, obs_topic: str) -> list:
    """The observation log, whatever canary topic each observation is of (each test's own log)."""
    return read_observations(cfg, obs_topic, None).seen


def _rebalanced(cfg, topic: str, member: str, after: int) -> bool:
    """Whether ``member``'s client counted a rebalance since that point of the observation log."""
    rcs = [int(o.get("rc", 0)) for at, o in _observed(cfg, topic)
           if at >= after and o.get("m") == member and o.get("k") == "progress"]
    return bool(rcs) and max(rcs) > min(rcs)


def _obs_end(cfg, topic: str) -> int:
    c = clients.consumer(cfg, "read_uncommitted", group="vigil-test")
    try:
        return clients.watermarks(c, topic, 0)[1]
    finally:
        c.close()


def _wait_consuming(cfg, topic: str, names: list[str], within_s: float) -> None:
    """Until every named member reported progress on a partition it owns, after the log's end now."""
    start = _obs_end(cfg, topic)
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        seen = _observed(cfg, topic)
        owning = {o["m"] for at, o in seen if at >= start and o.get("k") == "progress" and o.get("p")}
        if set(names) <= owning:
            return
        time.sleep(1.0)
    raise AssertionError(f"members {names} not all consuming within {within_s} s")


def test_static_restarts_cause_no_rebalance_dynamic_ones_do_a_paused_member_stalls_and_nothing_is_skipped(
        cluster_ready, tmp_path):
    env = cluster_ready
    suffix = uuid.uuid4().hex[:8]
    topic, obs_topic = f"group-src-{suffix}", f"group-obs-{suffix}"
    cfg = env["config"]
    cfg = cfg.model_copy(update={"groups": cfg.groups.model_copy(update={
        "session_timeout_ms": SESSION_MS, "commit_interval_ms": 300, "observation_topic": obs_topic})})
    clients.ensure_topic(clients.admin(cfg), topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
    ensure_observation_topic(cfg)
    canary = GroupCanary(cfg, topic, tmp_path / "group", group=f"vigil-group-{suffix}", static=True)
    stop, written = threading.Event(), Counter()
    writer = threading.Thread(target=write_source_with_aborts, args=(env["bootstrap"], topic, stop, written),
                              daemon=True)
    writer.start()
    try:
        canary.start()
        _wait_consuming(cfg, obs_topic, canary.names, 60)
        time.sleep(2)

        # 1. static: m1 killed -9 and back within its session timeout, now in the rack of a follower
        #    of its partition: no rebalance in m0 and m2, and that follower serves its fetches
        seen = _observed(cfg, obs_topic)
        fetching = [o["ff"] for _at, o in seen if o.get("m") == "m1" and o.get("k") == "progress" and o.get("ff")][-1]
        partition, (_broker, leader, _lag) = sorted(fetching.items())[0]
        follower = next(n for n in (1, 2, 3) if n != leader)
        before = _obs_end(cfg, obs_topic)
        canary.kill("m1")
        time.sleep(1)
        canary.start("m1", rack=rack_of(follower))
        time.sleep(SESSION_MS / 1000 + 1.5)  # past the old instance's session: a rebalance would have come
        _wait_consuming(cfg, obs_topic, ["m1"], 30)
        static_done = _obs_end(cfg, obs_topic)

        # 2. dynamic: m2 killed -9 and back as a dynamic member: the group rebalances
        canary.kill("m2")
        time.sleep(1)
        canary.start("m2", static=False)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not _rebalanced(cfg, obs_topic, "m0", static_done):
            time.sleep(1)
        _wait_consuming(cfg, obs_topic, ["m2"], 30)
        dynamic_done = _obs_end(cfg, obs_topic)

        # 3. m0 paused past its session timeout: its partitions go to the others, then it rejoins
        canary.pause("m0")
        time.sleep(SESSION_MS / 1000 + 4)
        canary.resume("m0")
        _wait_consuming(cfg, obs_topic, ["m0"], 60)

        # 4. the drills, on a member that owns a partition
        canary.drill("group_skip", "m1")
        canary.drill("group_rewind", "m1")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and {o["d"] for _at, o in _observed(cfg, obs_topic)
                                               if o.get("k") == "drill"} != {"group_skip", "group_rewind"}:
            time.sleep(1)
    finally:
        stop.set()
        writer.join(30)
        canary.stop()  # (each member commits what it consumed)
    log = read_observations(cfg, obs_topic, topic)
    seen, malformed = log.seen, log.malformed + log.foreign
    served = [o["ff"][partition] for at, o in seen if before <= at < static_done and o["m"] == "m1"
              and o["k"] == "progress" and partition in o.get("ff", {})]
    assert served and served[-1][:2] == [follower, leader], served  # a follower served m1's fetches
    static_rebalances = _rebalances(seen, {"m0", "m2"}, before, static_done)
    dynamic_rebalances = _rebalances(seen, {"m0", "m1"}, static_done, dynamic_done)
    print("rebalances: static restart", static_rebalances, "dynamic restart", dynamic_rebalances)
    assert sum(static_rebalances.values()) == 0, static_rebalances
    assert sum(dynamic_rebalances.values()) >= 1, dynamic_rebalances

    result = audit(cfg, topic, obs_topic, stall_ms=SESSION_MS - 1000)
    assert malformed == 0 and result.reference_records > 500
    drills = {d["d"]: d for d in result.drills}
    assert set(drills) == {"group_skip", "group_rewind"}, result.drills
    skipped = {(f.partition, f.offset) for f in result.findings if f.invariant == "group_skip"}
    rewound = {(f.partition, f.offset) for f in result.findings if f.invariant == "group_rewind"}
    assert skipped == {(drills["group_skip"]["p"], o) for o in drills["group_skip"]["offsets"]}
    assert rewound == {(drills["group_rewind"]["p"], o) for o in drills["group_rewind"]["offsets"]}
    assert len(skipped) == 3 and rewound
    assert result.counts["rebalance_stall"] >= 1  # m0's partitions while it was paused
    assert result.resets == 0 and result.observations_lost == 0  # (a new group's first start is no reset)
    assert result.judged_records > 0
    print("m0 after its pause:", [(o["k"], o.get("p"), o.get("r"), o.get("e")) for _at, o in seen
                                  if o["m"] == "m0" and o["k"] in ("lost", "revoked", "assigned", "ack") and o.get("r") != "ok"])
    print("redeliveries", result.redeliveries, "stalls", result.counts["rebalance_stall"], "records", result.reference_records)


def test_the_consumer_protocol_kip848_a_static_member_back_within_its_session_is_fenced_and_nothing_is_skipped(
        cluster_ready, tmp_path):
    """The new group protocol (KIP-848, ``group.protocol=consumer``; session and assignment are
    the broker's): two static members consume and commit; one stopped cleanly and started again
    takes its partitions back; one killed -9 and started again within the broker's session (45 s)
    is fenced — its new instance exits with ``UNRELEASED_INSTANCE_ID`` (status 3), which is what
    Vigil shows as a member exit. Nothing skipped or rewound (about 15 s)."""
    env = cluster_ready
    suffix = uuid.uuid4().hex[:8]
    topic, obs_topic = f"group848-src-{suffix}", f"group848-obs-{suffix}"
    cfg = env["config"]
    cfg = cfg.model_copy(update={"groups": cfg.groups.model_copy(update={
        "protocol": "consumer", "members": 2, "rack": "", "commit_interval_ms": 300, "observation_topic": obs_topic})})
    clients.ensure_topic(clients.admin(cfg), topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
    ensure_observation_topic(cfg)
    canary = GroupCanary(cfg, topic, tmp_path / "group", group=f"vigil-group848-{suffix}", static=True)
    stop, written = threading.Event(), Counter()
    writer = threading.Thread(target=write_source_with_aborts, args=(env["bootstrap"], topic, stop, written),
                              daemon=True)
    writer.start()
    try:
        canary.start()
        _wait_consuming(cfg, obs_topic, canary.names, 60)
        # a clean stop leaves the group as a static member does; started again, it is let back in
        canary.stop("m1")
        canary.start("m1")
        _wait_consuming(cfg, obs_topic, ["m1"], 60)
        # killed -9: the broker still holds its instance for the session; the new one is fenced
        canary.kill("m1")
        canary.start("m1")
        assert canary.procs["m1"].wait(timeout=30) == 3
        fenced = canary.procs["m1"]
        time.sleep(2)  # m0 goes on consuming its own partitions meanwhile
    finally:
        stop.set()
        writer.join(30)
        canary.stop()
    log = read_observations(cfg, obs_topic, topic)
    seen, malformed = log.seen, log.malformed + log.foreign
    fatal = [o for _at, o in seen if o.get("k") == "fatal" and o.get("m") == "m1"]
    # UNRELEASED_INSTANCE_ID, as librdkafka words it (its fatal error event carries the text only)
    assert fenced.returncode == 3 and fatal and "instance id is still used by another member" in fatal[-1]["e"].lower()
    result = audit(cfg, topic, obs_topic, stall_ms=60_000)
    assert malformed == 0 and result.observations_lost == 0 and result.reference_records > 200
    assert result.counts["group_skip"] == result.counts["group_rewind"] == 0, result.findings[:10]
    # what m0 and m1 committed before the kill passed every record up to there; after it, m1's
    # partitions wait for the old instance's session, so not every record is judged
    assert result.judged_records > 0
    print("consumer protocol:", {"records": result.reference_records, "judged": result.judged_records,
                                 "redeliveries": result.redeliveries, "fatal": fatal[-1]["e"]})
