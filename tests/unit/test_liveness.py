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
    assert lso_stuck(100, 100, 140) and not lso_stuck(100, 120, 140) and not lso_stuck(100, 100, 100)
