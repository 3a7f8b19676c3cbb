"""The Spark side of ``vigil watch``: session, sources, and the streaming query.

One query over the union of three Kafka sources — the canary topic read with
``kafka.isolation.level`` ``read_committed`` and ``read_uncommitted``, and the outcome ledger —
with a ``src`` column telling them apart, so both isolation levels and the outcomes meet in
one place (cross-isolation checks need both). ``failOnDataLoss=false``: Vigil detects loss
itself. ``maxOffsetsPerTrigger`` keeps a catch-up batch short; the processing-time trigger
gives the checker its clock (idle triggers still report progress). The micro-batch goes to
the driver as Arrow and into :func:`monitor.watch.batch.apply_batch` from ``foreachBatch``,
after the executors decoded the canary records' headers (:mod:`monitor.watch.executor`, shipped to
them as a zip by :mod:`monitor.watch.ship`; their Python is ``watch.executor_python``).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from monitor import client_config
from monitor.cluster import jars
from monitor.cluster.java import Java, find_java
from monitor.config import Config
from monitor.record_format import HEADER_SIZE
from monitor.watch import cds, jvm_decode, ship
from monitor.watch.topics import topics_by_src

SPARK_JAVA_MAX = 21
# Spark's JVM logs to stderr only (stdout carries `--json` output), warnings and up.
LOG4J2 = """status = error
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
rootLogger.level = warn
rootLogger.appenderRef.console.ref = console
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
logger.kafka.name = org.apache.kafka
logger.kafka.level = error
logger.spark_util.name = org.apache.spark.util.Utils
logger.spark_util.level = error
"""


OTHER_COLLECTOR = re.compile(r"-XX:\+Use(?!G1GC\b)\w*GC\b")  # a collector other than G1 chosen
LEDGER_RECORDS_PER_TASK = 40_000  # watch.ledger_records_per_task's in local mode


def session(cfg: Config, progress: Callable[[str], None] = lambda _m: None, app: str = "vigil-watch") -> SparkSession:
    connector = jars.spark_kafka_connector_jars(progress)
    decoder, mode = [], decode_mode(cfg)
    if mode == "jvm":
        decoder = [jvm_decode.decoder_jar(cfg.watch.java_home, progress)]
    elif mode == "driver" and cfg.watch.decode_on == "auto":  # (auto's choice in local mode without a javac)
        progress("no javac beside Spark's Java (a JRE only): the driver decodes the canary headers "
                 "(watch.decode_on; a JDK lets Spark's JVM do it)")
    java = find_java(cfg.watch.java_home, max_major=SPARK_JAVA_MAX)
    os.environ["JAVA_HOME"] = os.path.dirname(os.path.dirname(os.path.realpath(java.executable)))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log_config = Path(cfg.state_dir) / "spark-log4j2.properties"
    log_config.parent.mkdir(parents=True, exist_ok=True)
    log_config.write_text(LOG4J2)
    python = cfg.watch.executor_python or sys.executable
    os.environ["PYSPARK_PYTHON"] = python
    builder = SparkSession.builder.master(cfg.watch.spark_master) if cfg.watch.spark_master else SparkSession.builder
    spark = (
        builder.appName(app)
        .config("spark.pyspark.python", python)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.jars", ",".join(map(str, [*connector, *decoder])))
        .config("spark.driver.memory", cfg.watch.driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.extraJavaOptions", driver_java_options(cfg, log_config, java))
        .config("spark.executor.extraJavaOptions", f"-Dlog4j2.configurationFile={log_config.resolve()}")
        .getOrCreate()
    )
    spark.sparkContext.addPyFile(str(ship.executor_zip(cfg.state_dir)))
    return spark


def driver_java_options(cfg: Config, log_config: Path, java: Java | None = None) -> str:
    """spark.driver.extraJavaOptions: the log configuration, the class-data archive when
    ``watch.class_data_sharing`` (and this process starts the driver), ``watch.driver_gc_time_ratio``,
    then ``watch.driver_java_options`` (whose options win over these: the JVM takes an option's last)."""
    archive = ""
    if cfg.watch.class_data_sharing and cfg.watch.spark_master and java is not None:
        archive = cds.java_option(java)
    gc = ""
    if cfg.watch.driver_gc_time_ratio and not OTHER_COLLECTOR.search(cfg.watch.driver_java_options):
        gc = f"-XX:GCTimeRatio={cfg.watch.driver_gc_time_ratio}"  # (G1's; another collector reads it otherwise)
    return " ".join(filter(None, [f"-Dlog4j2.configurationFile={log_config.resolve()}", archive, gc,
                                  cfg.watch.driver_java_options.strip()]))


def ledger_records_per_task(cfg: Config) -> int:
    """``watch.ledger_records_per_task``, empty: 40,000 in local mode, 0 (Spark's plan) on a cluster."""
    if cfg.watch.ledger_records_per_task is not None:
        return cfg.watch.ledger_records_per_task
    return LEDGER_RECORDS_PER_TASK if cfg.watch.spark_master.startswith("local") else 0


def source(spark: SparkSession, cfg: Config, topic: str, isolation: str, src: int, ledger: bool = False,
           headers_only: bool = False) -> DataFrame:
    reader = spark.readStream.format("kafka")
    for key, value in client_config.spark_source(cfg, ledger).items():
        reader = reader.option(key, value)
    reader = (
        reader.option("subscribe", topic)
        .option("startingOffsets", cfg.watch.starting_offsets)
        .option("failOnDataLoss", "false")
        .option("maxOffsetsPerTrigger", str(cfg.watch.max_offsets_per_trigger))
        .option("kafkaConsumer.pollTimeoutMs", str(cfg.watch.poll_timeout_ms))
        .option("kafka.isolation.level", isolation)
        .option("kafka.fetch.max.wait.ms", str(cfg.watch.fetch_max_wait_ms))
    )
    split = ledger_records_per_task(cfg) if ledger else 0  # (never the canary's: a task is one offset range there)
    if split:
        reader = reader.option("maxRecordsPerPartition", str(split))
    df = reader.load()
    columns = [F.lit(src).cast("byte").alias("src"), "topic", "partition", "offset"]
    if headers_only:  # only what the checker needs of a canary record leaves the JVM (executor.decode_values)
        columns += [F.substring("value", 1, HEADER_SIZE).alias("value"), F.length("value").alias("vlen"),
                    F.crc32("value").alias("vcrc")]
    else:
        columns += ["value", F.length("value").alias("vlen"), F.lit(None).cast("bigint").alias("vcrc")]
    return df.select(*columns, F.unix_micros("timestamp").alias("ts_us"))


def union_of_sources(spark: SparkSession, cfg: Config, with_ledger: bool = True, headers_only: bool = False
                     ) -> DataFrame:
    """The three sources as Kafka rows (the bench's no-op reads these), the EOS pipeline's output
    when ``eos.enabled``, and the group canary's observations when ``groups.enabled``.
    ``headers_only``: of a canary record only its first 48 bytes, its length and its CRC-32 (what
    the checker needs: the header, and a digest identity for what is not a canary record)."""
    topics = topics_by_src(cfg)  # (the names the driver gives rows fetched without theirs)
    df = source(spark, cfg, topics[0], "read_committed", 0, headers_only=headers_only).unionByName(
        source(spark, cfg, topics[1], "read_uncommitted", 1, headers_only=headers_only))
    if with_ledger:
        df = df.unionByName(source(spark, cfg, topics[2], "read_committed", 2, ledger=True))
    if 3 in topics:  # the EOS pipeline's output (invariants.eos), when eos.enabled
        df = df.unionByName(source(spark, cfg, topics[3], "read_committed", 3))
    if 4 in topics:  # the group canary's observation log (invariants.groups), when groups.enabled
        df = df.unionByName(source(spark, cfg, topics[4], "read_uncommitted", 4))
    return df


def fetched_sources(spark: SparkSession, cfg: Config) -> DataFrame:
    """What the watch query hands its batch handler (``watch.decode_on``): runs decoded in Spark's JVM
    or by the executors' Python, else the sources' headers without their topic: the driver decodes them
    and names each row's topic from its ``src`` (:func:`monitor.watch.topics.topics_by_src`; the name
    was a quarter of a fetched row's bytes)."""
    mode = decode_mode(cfg)
    if mode == "jvm":
        return jvm_decode.decoded_in_jvm(spark, union_of_sources(spark, cfg, headers_only=True), topics_by_src(cfg))
    if mode == "executors":
        return decoded_sources(spark, cfg)
    return union_of_sources(spark, cfg, headers_only=True).drop("topic")


def decode_mode(cfg: Config) -> str:
    """Where the headers are decoded: ``jvm``, ``executors`` (their Python) or ``driver``
    (``watch.decode_on``; auto: the JVM in local mode — the driver where Spark's Java has no javac
    to compile the decoder with — and the executors' Python on a cluster)."""
    mode = cfg.watch.decode_on
    if mode != "auto":
        return mode
    if not cfg.watch.spark_master.startswith("local"):
        return "executors"
    return "jvm" if jvm_decode.javac_for_spark(cfg.watch.java_home) else "driver"


def decoded_sources(spark: SparkSession, cfg: Config) -> DataFrame:
    """The three sources decoded on the executors (:mod:`monitor.watch.executor`): what reaches
    the driver is headers, not values. No shuffle: each Spark partition is decoded where it was read."""
    from monitor.watch.executor import DECODED_DDL, decode_batches

    return union_of_sources(spark, cfg, headers_only=True).mapInArrow(decode_batches, DECODED_DDL)


def start_query(spark: SparkSession, cfg: Config, handler: Callable[[DataFrame, int], Any], name: str = "vigil",
                available_now: bool = False):
    """The watch query; ``available_now`` reads what is there and stops (the bench)."""
    writer = (
        fetched_sources(spark, cfg)
        .writeStream.queryName(name)
        .foreachBatch(handler)
        .option("checkpointLocation", str(cfg.spark_checkpoint_dir()))
    )
    if available_now:
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime=f"{cfg.watch.trigger_ms} milliseconds").start()
