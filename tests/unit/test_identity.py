import time

import pytest

from monitor.identity import IdentityError, claim
from monitor.record_format import writer_id_for


def test_incarnation_bumps_and_persists(tmp_path):
    before = int(time.time())
    first = claim(tmp_path, "pod-0/idem")
    assert before <= first.incarnation <= time.time() and first.writer_id == writer_id_for("pod-0/idem")
    with pytest.raises(IdentityError, match="already running"):
        claim(tmp_path, "pod-0/idem")
    first.release()
    second = claim(tmp_path, "pod-0/idem")
    assert second.incarnation == first.incarnation + 1
    second.release()
    assert claim(tmp_path, "other").incarnation >= before


def test_a_lost_state_directory_never_reuses_an_incarnation(tmp_path, monkeypatch):
    """A pod restarted without its volume: its next incarnation is above every one it used, as
    long as it restarted at most once a second (the clock is simulated here)."""
    from monitor import identity

    clock = iter(range(1_700_000_000, 1_700_000_100))
    monkeypatch.setattr(identity.time, "time", lambda: next(clock))
    used = []
    for _ in range(3):  # one restart per second
        ident = claim(tmp_path / "a", "pod-0/idem")
        used.append(ident.incarnation)
        ident.release()
    fresh = claim(tmp_path / "b", "pod-0/idem")  # the same instance, its state directory gone
    assert used == [used[0], used[0] + 1, used[0] + 2]
    assert fresh.incarnation > max(used) and fresh.writer_id == writer_id_for("pod-0/idem")


def test_corrupt_state_is_a_clear_error(tmp_path):
    claim(tmp_path, "x").release()
    (tmp_path / "writers" / "x.json").write_text("{not json")
    with pytest.raises(IdentityError, match="corrupt incarnation file"):
        claim(tmp_path, "x")
