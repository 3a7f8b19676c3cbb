"""A chaos run's verdict from live totals and the audit."""

from monitor.chaos.scenario import parse
from monitor.chaos.verdict import audit_counts, judge, live_counts, vanished_beyond_audit

SCENARIO = {"name": "s", "title": "t", "writers": [{"name": "w", "acks": "1", "idempotence": False}],
            "timeline": [{"at_s": 0, "fault": "kill", "target": "leader"}]}


def _s(**expect):
    return parse({**SCENARIO, "expect": expect}, "s.yaml")


def test_losses_the_configuration_allowed_keep_the_promise_and_must_match_the_audit():
    live = live_counts({"checker": {"violations": {"lost_write/read_committed/at_risk": 7,
                                                   "lost_write/read_uncommitted/at_risk": 7,
                                                   "stalled_poll/read_committed/guaranteed": 2}}})
    audit = audit_counts({"by_durability": {"read_committed": {"lost_write": {"at_risk": 7, "guaranteed": 0}},
                                            "read_uncommitted": {"lost_write": {"at_risk": 7}}}})
    v = judge(_s(promise_kept=True, nonzero=["lost_write", "stalled_poll"]), live, audit)
    assert v.promise_kept and v.live_equals_audit and v.expectations_met and v.passed


def test_a_guaranteed_loss_breaks_the_promise_and_a_count_apart_from_the_audit_fails_the_run():
    live = {("lost_write", "read_uncommitted", "guaranteed"): 3}
    v = judge(_s(promise_kept=True, zero=["duplicate"]), live, {("lost_write", "read_uncommitted", "guaranteed"): 2})
    assert not v.promise_kept and not v.passed
    assert v.unmet == ["Kafka's promise broken, expected kept"]
    assert v.disagreements == [{"invariant": "lost_write", "isolation": "read_uncommitted", "durability": "guaranteed",
                                "live": 3, "audit": 2}]


def test_rewritten_offsets_only_live_saw_are_a_note_not_a_disagreement():
    v = judge(_s(), {("inconsistent_offset", "read_committed", "at_risk"): 4}, {})
    assert v.live_equals_audit and v.notes and "rewritten" in v.notes[0]
    assert not judge(_s(), {}, {("inconsistent_offset", "read_committed", "at_risk"): 4}).live_equals_audit


def test_expected_counts_that_did_not_happen_are_unmet():
    v = judge(_s(nonzero=["stalled_poll"], zero=["lost_write"]), {("lost_write", "read_committed", "at_risk"): 1}, {})
    assert v.unmet == ["lost_write counted 1, expected none", "stalled_poll never counted"]


def _vanished(seq, iso="read_committed", cause="vanished", partition=1):
    return {"invariant": "lost_write", "isolation": iso, "durability": "at_risk", "cause": cause, "topic_id": "T",
            "partition": partition, "writer_id": "00000000000000ab", "incarnation": 3, "seq": seq, "offsets": [seq]}


def test_writes_seen_vanish_that_the_audit_leaves_undecided_explain_live_above_audit_exactly():
    undecided = [["read_committed", "T", 1, "00000000000000ab", 3, s] for s in (85, 99, 120, 90)] + \
        [["read_uncommitted", "T", 1, "00000000000000ab", 3, 99]]
    evidence = [_vanished(84), _vanished(85), _vanished(99), _vanished(120), _vanished(90, cause=""),
                _vanished(90, partition=2), _vanished(99, iso="read_uncommitted"), _vanished(100, iso="read_uncommitted")]
    beyond = vanished_beyond_audit(evidence, undecided)
    assert beyond == {("lost_write", "read_committed", "at_risk"): 3, ("lost_write", "read_uncommitted", "at_risk"): 1}
    key, ru = ("lost_write", "read_committed", "at_risk"), ("lost_write", "read_uncommitted", "at_risk")
    v = judge(_s(), {key: 10, ru: 1}, {key: 7}, beyond)
    assert v.live_equals_audit and "3 acked writes read at their offset and later gone" in v.notes[0]
    assert not judge(_s(), {key: 11, ru: 1}, {key: 7}, beyond).live_equals_audit  # one more than explained
    assert not judge(_s(), {key: 10, ru: 1}, {key: 7}).live_equals_audit
    # equal counts although the audit left three of live's losses undecided: it counted three live did not
    assert not judge(_s(), {key: 10, ru: 1}, {key: 10}, beyond).live_equals_audit


def test_the_application_canaries_are_compared_with_the_audit_and_a_guaranteed_one_breaks_the_promise():
    audit = audit_counts({"by_durability": {"read_committed": {
        "group_skip": {"guaranteed": 2, "at_risk": 0}, "rebalance_stall": {"guaranteed": 1},
        "eos_loss": {"guaranteed": 0}}}})
    assert audit == {("group_skip", "read_committed", "guaranteed"): 2,
                     ("rebalance_stall", "read_committed", "guaranteed"): 1}
    live = live_counts({"checker": {"violations": {"group_skip/read_committed/guaranteed": 2,
                                                   "rebalance_stall/read_committed/guaranteed": 1}}})
    v = judge(_s(promise_kept=True), live, audit)
    assert v.live_equals_audit and not v.promise_kept and v.unmet == ["Kafka's promise broken, expected kept"]
    stall_only = {("rebalance_stall", "read_committed", "guaranteed"): 1}
    assert judge(_s(promise_kept=True), stall_only, stall_only).passed  # liveness: compared, no broken promise
    v = judge(_s(), {("eos_duplicate", "read_committed", "guaranteed"): 1}, {})
    assert v.disagreements == [{"invariant": "eos_duplicate", "isolation": "read_committed",
                                "durability": "guaranteed", "live": 1, "audit": 0}]
