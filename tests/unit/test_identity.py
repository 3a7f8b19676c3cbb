import pytest

from monitor.identity import IdentityError, claim
from monitor.record_format import writer_id_for


def test_incarnation_bumps_and_persists(tmp_path):
    first = claim(tmp_path, "pod-0/idem")
    assert first.incarnation == 1 and first.writer_id == writer_id_for("pod-0/idem")
    with pytest.raises(IdentityError, match="already running"):
        claim(tmp_path, "pod-0/idem")
    first.release()
    second = claim(tmp_path, "pod-0/idem")
    assert second.incarnation == 2
    second.release()
    assert claim(tmp_path, "other").incarnation == 1


def test_corrupt_state_is_a_clear_error(tmp_path):
    claim(tmp_path, "x").release()
    (tmp_path / "writers" / "x.json").write_text("{not json")
    with pytest.raises(IdentityError, match="corrupt incarnation file"):
        claim(tmp_path, "x")
