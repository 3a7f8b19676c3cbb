"""Scale-out: the same watch job on a real Spark standalone cluster (a master and two workers, each
its own JVM, executors in further JVMs) finds exactly what it finds in local mode — with the
executors' Python unable to import Vigil from the checkout, so the executor-side code can only
have come from the zip the driver ships."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from collections import Counter

from monitor.watch.standalone import StandaloneSpark
from tests.drill_rows import drill_row
from tests.integration.helpers import vigil, vigil_json
from tests.integration.watch_helpers import counts_of, watch_config

DRILLS = ("lost_write", "duplicate", "reorder", "offset_mismatch", "aborted_read", "partial_txn")


def _python_without_vigil(tmp) -> str:
    """A Python with this virtualenv's libraries (numpy, pyarrow, pyspark) but not Vigil: the
    editable install's finder is not loaded from a directory a .pth line merely adds."""
    env = tmp / "executor-python"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    purelib = sysconfig.get_paths(vars={"base": str(env), "platbase": str(env)})["purelib"]
    (tmp / "executor-python" / purelib.split(str(env) + "/", 1)[1] / "vigil-deps.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n")
    python = str(env / "bin" / "python")
    probe = subprocess.run([python, "-c", "import numpy, pyarrow, pyspark, importlib.util as u;"
                            "print(u.find_spec('monitor') is None and u.find_spec('invariants') is None)"],
                           capture_output=True, text=True, cwd=tmp, timeout=60)
    assert probe.stdout.strip() == "True", probe.stderr  # the executors cannot import Vigil by themselves
    return python


def test_watch_on_a_standalone_cluster_counts_what_local_mode_counts(cluster_ready, tmp_path):
    local_dir, standalone_dir = tmp_path / "local", tmp_path / "standalone"
    local_dir.mkdir()
    standalone_dir.mkdir()
    _cfg, path = watch_config(cluster_ready, local_dir, "standalone", 0)
    vigil(path, "produce", "--count", "3000", "--rate", "0", timeout=120)
    want: Counter = Counter()
    for kind in DRILLS:
        report = vigil_json(path, "drill", kind, "--count", "2", "--partition", "1")
        assert report["count"] == 2
        want.update(drill_row(kind, 2))
    vigil(path, "produce", "--count", "1000", "--rate", "0", timeout=120)  # read past the drills' settle window

    local = vigil_json(path, "watch", "--until-caught-up", timeout=300)
    spark = StandaloneSpark(tmp_path / "spark", workers=2, port_base=27177)
    try:
        spark.up()
        assert spark.alive_workers() == 2
        _cfg2, path2 = watch_config(cluster_ready, standalone_dir, "standalone", 0, watch={
            "spark_master": spark.master_url, "executor_python": _python_without_vigil(tmp_path)})
        remote = vigil_json(path2, "watch", "--until-caught-up", timeout=300)
        executors = list((tmp_path / "spark" / "work").glob("worker-*/app-*/*/stderr"))
        assert len({p.parts[-4] for p in executors}) == 2, executors  # both workers ran executors
    finally:
        spark.down()
    assert spark.pids() == []
    local_checked, remote_checked = local["checker"]["records_checked"], remote["checker"]["records_checked"]
    assert counts_of(local) == dict(want)
    assert counts_of(remote) == counts_of(local)
    assert remote_checked == local_checked and local_checked["read_committed"] >= 4000
