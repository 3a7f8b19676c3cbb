"""Resolve official jars from Maven Central once, into a cache that later runs use offline.

A resolution is a small throw-away POM handed to ``mvn dependency:copy-dependencies``; the
copied jars land in ``<cache>/<name>/`` with a ``.complete`` marker written last, so an
interrupted resolve is redone and a finished one is never asked for again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

from invariants.errors import VigilError

DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
# Kafka 4.x ships slf4j 1.7 but its published POM carries no binding: without this one
# the brokers log nothing at all.
LOG4J_SLF4J_BINDING = ("org.apache.logging.log4j", "log4j-slf4j-impl", "2.24.3")


# The Spark Kafka connector for the pinned pyspark (4.3.0). Maven Central does not hold
# spark-sql-kafka-0-10 4.3.0 (nor spark-token-provider-kafka-0-10 past 4.1.0-preview1), so the
# newest official artifacts it does hold are pinned, each without transitive dependencies
# (Spark, Scala and Hadoop come from pyspark itself): the 4.2.0 connector with its own
# kafka-clients and commons-pool2 versions. The 4.0.0 connector fails on Spark 4.3
# (NoClassDefFoundError LogKeys$OFFSETS$); this set is exercised by the integration tests.
SPARK_KAFKA_CONNECTOR = [
    ("org.apache.spark", "spark-sql-kafka-0-10_2.13", "4.2.0"),
    ("org.apache.spark", "spark-token-provider-kafka-0-10_2.13", "4.1.0-preview1"),
    ("org.apache.kafka", "kafka-clients", "3.9.2"),
    ("org.apache.commons", "commons-pool2", "2.13.1"),
]
# Spark's parent POM declares an extra repository this machine cannot reach; a mirror of it
# onto an empty local directory makes Maven skip it instead of failing the resolve.
_SETTINGS = """<settings><mirrors><mirror><id>vigil-skip-unreachable</id>
<mirrorOf>gcs-maven-central-mirror</mirrorOf><url>file://{empty}</url></mirror></mirrors></settings>
"""


class ResolveError(VigilError):
    pass


def cache_root() -> Path:
    return Path(os.environ.get("VIGIL_JAR_CACHE") or Path.home() / ".cache" / "vigil" / "jars")


def _pom(coordinates: list[tuple[str, str, str]]) -> str:
    deps = "\n".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"
        for g, a, v in coordinates
    )
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.vigil</groupId><artifactId>resolve</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{deps}
  </dependencies>
</project>
"""


def resolve(name: str, coordinates: list[tuple[str, str, str]],
            progress: Callable[[str], None] = lambda _msg: None, transitive: bool = True) -> Path:
    """Directory holding the runtime jars of ``coordinates`` (resolving them if needed).

    ``transitive=False`` copies exactly the listed artifacts.
    """
    target = cache_root() / name
    if (target / ".complete").exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ResolveError(
            "Maven (mvn) is not installed; it is needed once to fetch the Kafka jars "
            "(scripts/bootstrap.sh installs it with apt-get)")
    progress(f"resolving {name} from Maven Central (once; cached in {target})")
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vigil-mvn-") as tmp:
        (Path(tmp) / "pom.xml").write_text(_pom(coordinates))
        (Path(tmp) / "empty").mkdir()
        (Path(tmp) / "settings.xml").write_text(_SETTINGS.format(empty=Path(tmp) / "empty"))
        staging = Path(tmp) / "lib"
        base = [mvn, "-B", "-q", "-s", str(Path(tmp) / "settings.xml")]
        if transitive:
            cmds = [base + [f"{DEPENDENCY_PLUGIN}:copy-dependencies", f"-DoutputDirectory={staging}",
                            "-DincludeScope=runtime"]]
        else:
            cmds = [base + [f"{DEPENDENCY_PLUGIN}:copy", f"-Dartifact={g}:{a}:{v}", f"-DoutputDirectory={staging}"]
                    for g, a, v in coordinates]
        for cmd in cmds:
            proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
            if proc.returncode != 0:
                tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
                raise ResolveError(f"resolving {name} with Maven failed (exit {proc.returncode}):\n{tail}")
        jars = list(staging.glob("*.jar"))
        if not jars:
            raise ResolveError(f"resolving {name} produced no jars")
        shutil.copytree(staging, target)
    (target / ".complete").write_text("\n".join(sorted(j.name for j in jars)) + "\n")
    return target


def kafka_broker_jars(version: str, progress: Callable[[str], None] = lambda _m: None) -> Path:
    return resolve(f"kafka-{version}", [("org.apache.kafka", "kafka_2.13", version), LOG4J_SLF4J_BINDING],
                   progress)


def spark_kafka_connector_jars(progress: Callable[[str], None] = lambda _m: None) -> list[str]:
    """Local paths of the connector jars (for ``spark.jars``)."""
    version = SPARK_KAFKA_CONNECTOR[0][2]
    target = resolve(f"spark-sql-kafka-{version}", SPARK_KAFKA_CONNECTOR, progress, transitive=False)
    return sorted(str(p) for p in target.glob("*.jar"))
