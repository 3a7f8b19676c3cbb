"""The canary records' decoding in Spark's JVM (``watch.decode_on: jvm``): ``JvmDecode.java``.

Where each Spark partition of the Kafka sources is read, the JVM decodes the headers and cuts them
into runs, with :mod:`monitor.watch.executor`'s rows and rules (``decode_batch``), so no row per
record crosses into Python: in local mode the rows Spark hands the driver were a fifth of the no-op's
rate on their own (README, "A warm JVM for both, and the fetch alone"). The class is compiled once per
source and Spark version into ``<jar cache>/jvm-decode-<hash>.jar`` (javac, as the EOS worker) and goes
to Spark's ``spark.jars``, which ships it to the executors of a cluster.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Callable

from pyspark.sql import DataFrame, SparkSession

from monitor.cluster import jars
from monitor.eos.build import BuildError, javac_for

SOURCE = Path(__file__).with_name("JvmDecode.java")
CLASS = "JvmDecode"


def spark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def decoder_jar(java_home: str = "", progress: Callable[[str], None] = lambda _m: None) -> Path:
    """The jar holding ``JvmDecode`` (compiled first when the source or Spark changed)."""
    import pyspark

    digest = hashlib.sha256(SOURCE.read_bytes() + pyspark.__version__.encode()).hexdigest()[:12]
    target = jars.cache_root() / f"jvm-decode-{digest}.jar"
    if target.exists():
        return target
    progress("compiling the JVM decoder (javac)")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".jvm-decode-", dir=target.parent))
    try:
        # --release 17: Spark's JVM may be 17 or 21 (monitor.watch.spark.SPARK_JAVA_MAX)
        proc = subprocess.run([javac_for(java_home), "-nowarn", "--release", "17", "-d", str(tmp / "classes"),
                               "-cp", str(spark_jars_dir() / "*"), str(SOURCE)],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise BuildError(f"javac failed on {SOURCE.name}:\n{(proc.stdout + proc.stderr).strip()[-2000:]}")
        part = tmp / "decoder.jar"
        with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as jar:  # (a jar is a zip; no manifest needed)
            for cls in sorted((tmp / "classes").glob("*.class")):
                jar.write(cls, cls.name)
        os.replace(part, target)  # whole or not at all; a concurrent build that won is as good
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def decoded_in_jvm(spark: SparkSession, df: DataFrame, topics: dict[int, str], fixed_now_us: int = 0) -> DataFrame:
    """``df`` (the sources' headers, :func:`monitor.watch.spark.union_of_sources` with ``headers_only``)
    decoded by ``JvmDecode``: :data:`monitor.watch.executor.DECODED_SCHEMA`'s rows, each named after its
    ``src``'s topic in ``topics``. ``fixed_now_us`` > 0: the decoding time of every partition (tests)."""
    from monitor.watch.executor import DECODED_DDL, LATENCY_EDGES_US

    if any("," in name for name in topics.values()):
        raise ValueError(f"a topic name with a comma: {sorted(topics.values())}")  # (Kafka allows none)
    names = ",".join(topics.get(src, "") for src in range(max(topics) + 1))
    edges = ",".join(repr(float(e)) for e in LATENCY_EDGES_US)  # (repr: the exact double, parsed back as it)
    jdf = spark._jvm.JvmDecode.decode(df._jdf, names, edges, int(fixed_now_us), DECODED_DDL)
    return DataFrame(jdf, spark)
