from invariants.liveness import PollProgress, StallTracker, lso_stuck, poll_stuck


def test_episode_counted_once_after_threshold_and_cleared():
    t = StallTracker(threshold_s=10)
    assert [t.observe("p0", True, now) for now in (0, 5, 10)] == [False, False, False]
    assert t.observe("p0", True, 10.5) is True
    assert t.observe("p0", True, 30) is False  # same episode
    assert t.open_episodes() == {"p0"}
    assert t.observe("p0", False, 31) is False and t.open_episodes() == set()
    assert t.observe("p0", True, 40) is False and t.observe("p0", True, 51) is True  # a new episode


def test_keys_are_independent():
    t = StallTracker(threshold_s=1)
    t.observe("a", True, 0)
    t.observe("b", False, 0)
    assert t.observe("a", True, 2) and not t.observe("b", False, 2)


def test_poll_and_lso_conditions():
    assert poll_stuck(PollProgress(position=5), 5, 9)
    assert not poll_stuck(PollProgress(position=5), 6, 9)  # progressed
    assert not poll_stuck(PollProgress(position=9), 9, 9)  # nothing available
    assert lso_stuck(100, 100, 130, 140)  # frozen while the high watermark moved on
    assert not lso_stuck(100, 120, 130, 140)  # the LSO moved
    assert not lso_stuck(100, 100, 100, 100)  # nothing beyond it
    assert not lso_stuck(100, 100, 140, 140)  # the high watermark did not move either: nobody writes


def test_a_frozen_lso_under_a_frozen_high_watermark_is_no_hanging_transaction():
    """What a broker restart looked like to the old rule (LSO 10373 below a high watermark of 10376,
    both only the last values known): a false lso_stuck."""
    from invariants.liveness import LivenessJudge

    judge = LivenessJudge(stall_s=5, lso_s=6, producer_s=30)
    assert [v for now in range(0, 60, 3) for v in judge.lso("T", 0, 10373, 10376, now)] == []
    # a real hanging transaction: the high watermark moves on past a frozen LSO
    found = [v for now in range(60, 120, 3) for v in judge.lso("T", 0, 10373, 10376 + now, now)]
    assert [(v.invariant.value, v.partition) for v in found] == [("lso_stuck", 0)]


def test_the_judge_counts_a_stall_once_and_a_restart_does_not_count_it_again():
    from invariants.liveness import LivenessJudge
    from invariants.model import RU

    judge = LivenessJudge(stall_s=5, lso_s=5, producer_s=30)
    found = [v for now in (0, 3, 6, 9) for v in judge.poll(RU, "T", 0, 10, 20, now)]
    assert [(v.invariant.value, v.partition) for v in found] == [("stalled_poll", 0)]
    saved = judge.open_doc()
    again = LivenessJudge(stall_s=5, lso_s=5, producer_s=30)
    again.prime(saved, now=100)
    assert [v for now in (100, 110, 120) for v in again.poll(RU, "T", 0, 10, 20, now)] == []


def test_a_writer_waiting_too_long_for_an_outcome_is_a_producer_stall():
    from invariants.liveness import LivenessJudge

    judge = LivenessJudge(stall_s=5, lso_s=5, producer_s=30)
    assert judge.producer("w", (9, 1), oldest_pending_us=0, now=20) == []
    assert judge.producer("w", (9, 1), oldest_pending_us=0, now=31) == []  # over the threshold: the episode opens
    (v,) = judge.producer("w", (9, 1), oldest_pending_us=0, now=32)  # and is counted at the next observation
    assert v.invariant.value == "producer_stalled" and v.writer == (9, 1)
    assert judge.producer("w", (9, 1), oldest_pending_us=None, now=40) == []  # it got its outcome
