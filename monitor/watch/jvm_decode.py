"""The canary records' decoding in Spark's JVM (``watch.decode_on: jvm``): ``JvmDecode.java``.

Where each Spark partition of the Kafka sources is read, the JVM decodes the headers and cuts them
into runs, with :mod:`monitor.watch.executor`'s rows and rules (``decode_batch``), so no row per
record crosses into Python: in local mode the rows Spark hands the driver were a fifth of the no-op's
rate on their own (README, "A warm JVM for both, and the fetch alone"). The class is compiled once per
source and Spark version into ``<jar cache>/jvm-decode-<hash>.jar`` (javac, as the EOS worker) and goes
to Spark's ``spark.jars``, which ships it to the executors of a cluster.
"""

from __future__ import annotations

import functools
import hashlib
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Callable

from pyspark.sql import DataFrame, SparkSession

from monitor.cluster import jars
from monitor.cluster.java import JavaError, find_java
from monitor.durable import replace_durably
from monitor.eos.build import BuildError

SOURCE = Path(__file__).with_name("JvmDecode.java")
CLASS = "JvmDecode"


def spark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


@functools.lru_cache(maxsize=None)
def javac_for_spark(java_home: str = "") -> str | None:
    """javac beside the Java Spark runs on (``watch.java_home``, or the newest Java Spark supports),
    or None where that Java is a JRE only."""
    from monitor.watch.spark import SPARK_JAVA_MAX

    try:
        java = find_java(java_home, max_major=SPARK_JAVA_MAX)
    except JavaError:
        return None
    javac = Path(java.executable).resolve().with_name("javac")
    return str(javac) if javac.exists() else None


def _whole(jar: Path) -> bool:
    """Whether ``jar`` holds the class (a build cut short by a crash leaves less, or nothing)."""
    try:
        with zipfile.ZipFile(jar) as z:
            return f"{CLASS}.class" in z.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def jar_path() -> Path:
    """Where the jar of this source and Spark version lives in the jar cache (it may not exist)."""
    import pyspark

    digest = hashlib.sha256(SOURCE.read_bytes() + pyspark.__version__.encode()).hexdigest()[:12]
    return jars.cache_root() / f"jvm-decode-{digest}.jar"


def decoder_jar(java_home: str = "", progress: Callable[[str], None] = lambda _m: None) -> Path:
    """The jar holding ``JvmDecode`` (compiled first when the source or Spark changed)."""
    target = jar_path()
    if _whole(target):
        return target
    javac = javac_for_spark(java_home)
    if javac is None:
        raise BuildError("watch.decode_on: jvm compiles monitor/watch/JvmDecode.java once, and the Java Spark runs on "
                         "has no javac beside it (a JRE only): install a JDK (scripts/bootstrap.sh installs "
                         "openjdk-17-jdk-headless), or set watch.decode_on: driver")
    progress("compiling the JVM decoder (javac)")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".jvm-decode-", dir=target.parent))
    try:
        # --release 17: Spark's JVM may be 17 or 21 (monitor.watch.spark.SPARK_JAVA_MAX)
        proc = subprocess.run([javac, "-nowarn", "--release", "17", "-d", str(tmp / "classes"),
                               "-cp", str(spark_jars_dir() / "*"), str(SOURCE)],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise BuildError(f"javac failed on {SOURCE.name}:\n{(proc.stdout + proc.stderr).strip()[-2000:]}")
        part = tmp / "decoder.jar"
        with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as jar:  # (a jar is a zip; no manifest needed)
            for cls in sorted((tmp / "classes").glob("*.class")):
                jar.write(cls, cls.name)
        # durably, whole or not at all (a concurrent build that won is as good)
        replace_durably(target, lambda f: f.write(part.read_bytes()), tmp=tmp / "decoder.jar.part")
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
