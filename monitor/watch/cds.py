"""A class-data-sharing archive of Spark's driver JVM (``watch.class_data_sharing``).

Spark's driver loads some ten thousand classes at each start; on 2 busy cores that is most of the
40-60 s a `vigil watch` takes to its first batch. A dynamic CDS archive (JDK 13+,
``-XX:ArchiveClassesAtExit``) holds those classes already parsed and verified, and a JVM started
with ``-XX:SharedArchiveFile`` maps them instead. The archive is made once per virtualenv, Java
build and Spark installation (:func:`archive_path` names all three: the JVM refuses an archive
whose class path or build differ) by a short local Spark job in a process of its own
(:func:`build`, run by ``scripts/bootstrap.sh``), written under a temporary name and renamed
when its JVM has exited, so a watch never maps a half-written file. Without an archive a watch
starts as before, and so does a JVM that cannot use it (seen with ``-Xmx40g``: other object
pointers than the archive's; it said nothing).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from monitor.cluster.java import Java, find_java

CDS_DIR = Path(sys.prefix) / "share" / "vigil" / "spark-cds"  # with the virtualenv (its paths are in the archive)


def archive_path(java: Java) -> Path:
    """Where the archive for this Java build and Spark installation lives (it may not exist)."""
    import pyspark

    key = "\n".join([os.path.realpath(java.executable), java.version, os.path.realpath(pyspark.__file__),
                     pyspark.__version__])
    return CDS_DIR / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def java_option(java: Java) -> str:
    """The driver's JVM option that maps the archive, or "" when there is none yet."""
    path = archive_path(java)
    return f"-XX:SharedArchiveFile={path}" if path.is_file() else ""


def build(progress: Callable[[str], None] = lambda _m: None, timeout_s: float = 600) -> Path | None:
    """Make the archive unless it exists (a short local Spark job in a child process); the path,
    or None when it could not be made (said through ``progress``: the watch runs without it)."""
    from monitor.watch.spark import SPARK_JAVA_MAX  # (here: monitor.watch.spark imports this module)

    path = archive_path(find_java("", max_major=SPARK_JAVA_MAX))
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
    progress("making a class-data archive of Spark's driver JVM (once, 1-2 minutes: each watch then starts faster)")
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "monitor.watch.cds", str(tmp)], capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        progress(f"no class-data archive of Spark's driver JVM: not made within {timeout_s:.0f} s")
        tmp.unlink(missing_ok=True)
        return None
    if done.returncode != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
        tail = "\n".join((done.stderr or "").splitlines()[-5:])
        progress(f"no class-data archive of Spark's driver JVM (exit {done.returncode}): {tail}")
        tmp.unlink(missing_ok=True)
        return None
    os.replace(tmp, path)
    for old in path.parent.iterdir():  # archives of an earlier Java or Spark: no JVM here maps them again
        if old != path and old.suffix in (".jsa", ".tmp") and time.time() - old.stat().st_mtime > 3600:
            old.unlink(missing_ok=True)
    progress(f"class-data archive of Spark's driver JVM: {path} ({path.stat().st_size >> 20} MiB, "
             f"{time.monotonic() - started:.0f} s)")
    return path


def _dump(out: Path) -> None:
    """In a child process: a local Spark session whose JVM writes the archive to ``out`` when it
    exits, after the work a watch's start does (a streaming query with foreachBatch, Arrow to
    Python); returns once that JVM has exited."""
    from pyspark.sql import functions as F

    from monitor.config import parse
    from monitor.watch import spark as watch_spark

    with tempfile.TemporaryDirectory(prefix="vigil-cds-") as state:
        cfg = parse({"state_dir": state, "watch": {"class_data_sharing": False,
                                                   "driver_java_options": f"-XX:ArchiveClassesAtExit={out}"}})
        spark = watch_spark.session(cfg, app="vigil-cds")
        jvm = spark.sparkContext._gateway.proc  # type: ignore[union-attr]  # (pyspark keeps the JVM's Popen)
        batches: list[int] = []

        def handler(df, _batch_id):
            batches.append(df.select("value", (F.col("value") % 7).alias("m")).toArrow().num_rows)

        query = (spark.readStream.format("rate").option("rowsPerSecond", 100).load()
                 .writeStream.foreachBatch(handler).trigger(processingTime="200 milliseconds")
                 .option("checkpointLocation", str(Path(state) / "checkpoint")).start())
        deadline = time.monotonic() + 120
        while len(batches) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        query.stop()
        spark.stop()
        jvm.stdin.close()  # the gateway's JVM exits on end of input, writing the archive first
        jvm.wait(300)


if __name__ == "__main__":
    _dump(Path(sys.argv[1]))
