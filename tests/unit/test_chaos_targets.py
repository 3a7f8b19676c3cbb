"""Resolving a step's target to node ids."""

import pytest

from monitor.chaos.scenario import ScenarioError
from monitor.chaos.targets import Resolver, coordinator_partition, java_string_hash
from monitor.clients import PartitionView


def test_java_string_hash_matches_java():
    # values of "".hashCode(), "a".hashCode(), "hello".hashCode() and one that overflows negative
    assert [java_string_hash(s) for s in ("", "a", "hello", "polygenelubricants")] == \
        [0, 97, 99162322, -2147483648]
    assert coordinator_partition("polygenelubricants", 50) == 0  # Integer.MIN_VALUE maps to 0
    assert coordinator_partition("hello", 50) == 99162322 % 50


def _resolver(**kw):
    txn_state = {p: PartitionView(1, (1, 2, 3), (1,)) for p in range(50)}
    txn_state[22] = PartitionView(3, (3, 1, 2), (3,))
    topics = {"c": {0: PartitionView(2, (2, 3, 1), (2, 3))}, "__transaction_state": txn_state}
    return Resolver(topics.__getitem__, lambda: 1, (1, 2, 3), "c", **kw)


def test_targets_resolve_to_nodes_now_and_bound_names_keep_theirs():
    r = _resolver(transactional_id="hello")  # 99162322 % 50 == 22
    assert r.resolve("leader", {}) == (2,) and r.resolve("leader:0", {}) == (2,)
    assert r.resolve("followers", {}) == (3, 1)
    assert r.resolve("coordinator", {}) == (3,)
    assert r.resolve("controller", {}) == (1,) and r.resolve("node:3", {}) == (3,) and r.resolve("all", {}) == (1, 2, 3)
    assert r.resolve("victim", {"victim": (2,)}) == (2,)


def test_a_target_that_cannot_be_resolved_says_why():
    with pytest.raises(ScenarioError, match="the cluster has nodes 1, 2, 3"):
        _resolver().resolve("node:7", {})
    with pytest.raises(ScenarioError, match="no transactional writer"):
        _resolver().resolve("coordinator", {})


def test_leader_off_ledger_skips_canary_partitions_whose_leader_leads_the_runs_ledger():
    views = {0: PartitionView(2, (2, 3, 1), (2, 3, 1)), 1: PartitionView(3, (3, 1, 2), (3, 1, 2)),
             2: PartitionView(1, (1, 2, 3), (1, 2, 3))}
    r = Resolver({"c": views}.__getitem__, lambda: 1, (1, 2, 3), "c", ledger_leaders=lambda: frozenset({2}))
    assert r.resolve("leader_off_ledger", {}) == (3,)
    assert r.led_by((3,)) == [1] and r.led_by((1, 2)) == [0, 2]
    r.ledger_leaders = lambda: frozenset({1, 2, 3})
    with pytest.raises(ScenarioError, match="also leads a ledger partition"):
        r.resolve("leader_off_ledger", {})


def test_a_started_node_is_waited_for_until_it_is_back_and_a_late_one_is_said_not_raised():
    from monitor.chaos import faults
    from monitor.chaos.scenario import Step

    class Cluster:
        def __init__(self):
            self.calls = []

        def start_node(self, n):
            self.calls.append(("start", n))

        def wait_node_ready(self, n, timeout):
            self.calls.append(("ready", n, timeout))
            return n != 3

    cluster, said = Cluster(), []
    res = Resolver(lambda _t: {}, lambda: 1, (1, 2, 3), "canary")
    step = Step.model_validate({"at_s": 0, "fault": "start", "target": "all", "args": {"ready_s": 5}})
    nodes, undo = faults.apply(step, cluster, res, {}, said.append)
    assert nodes == (1, 2, 3) and undo is None
    assert cluster.calls == [("start", 1), ("start", 2), ("start", 3), ("ready", 1, 5.0), ("ready", 2, 5.0),
                             ("ready", 3, 5.0)]
    assert said[-1] == "node(s) 3 not back in the cluster after 5 s"
    default = Step.model_validate({"at_s": 0, "fault": "start", "target": "node:2"})
    faults.apply(default, cluster, res, {}, said.append)
    assert cluster.calls[-1] == ("ready", 2, faults.START_READY_S)
