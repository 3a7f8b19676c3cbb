"""``vigil bench --only tws``: (d) the other design for checking on the executors, measured beside (b) and (c).

Per-partition state on the executors: the two canary sources' rows (their 48-byte headers only, as
the checker's fetch takes them) grouped by (reader, partition) and judged by
``transformWithStateInPandas`` with the RocksDB state store, one value of state per key (the last
seq of each writer incarnation). What it judges is a **part** of what (c) does — per partition,
each writer's seqs in offset order: the gaps and the repeats — and nothing the second stage such a
design needs would do (transactions across partitions, read_committed against read_uncommitted, the
ledger's acknowledgements): its rate is the most that direction could reach here, not what it
would. Its rows go through a shuffle to the stateful operator, whose state is committed every batch;
what reaches this process is one row per key and batch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from monitor.config import Config
from monitor.watch.executor import KIND_CANARY, decode_values

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
OUTPUT_DDL = "src byte, partition int, reads long, gaps long, repeats long"


def judge_partition(carried: dict[tuple[int, int], int], offsets: np.ndarray, writer: np.ndarray, inc: np.ndarray,
                    seq: np.ndarray) -> tuple[int, int, dict[tuple[int, int], int]]:
    """One partition's canary records of one batch (any order: their offsets, writer ids,
    incarnations and seqs) against the last seq of each (writer, incarnation) before it
    (``carried``): the seqs that skip ahead (gaps) and those at or below the one before (repeats),
    in offset order per writer incarnation, and the last seqs after it."""
    if not len(offsets):
        return 0, 0, carried
    order = np.lexsort((offsets, inc, writer))
    wid, inc, seq = writer[order], inc[order].astype(np.int64), seq[order].astype(np.int64)
    first = np.ones(len(seq), dtype=bool)
    first[1:] = (wid[1:] != wid[:-1]) | (inc[1:] != inc[:-1])
    before = np.empty_like(seq)
    before[1:] = seq[:-1]
    starts = np.flatnonzero(first)
    known = np.array([carried.get((int(wid[i]), int(inc[i])), -2) for i in starts], dtype=np.int64)
    before[starts] = known  # (-2: nothing before, the first seq is taken as it comes)
    step = seq - before
    judged = ~first | (before != -2)
    gaps = int(np.count_nonzero(judged & (step > 1)))
    repeats = int(np.count_nonzero(judged & (step <= 0)))
    out = dict(carried)
    ends = np.append(starts[1:], len(seq)) - 1
    for s, e in zip(starts, ends):
        out[(int(wid[s]), int(inc[s]))] = int(seq[e])
    return gaps, repeats, out


def judge_rows(carried: dict[tuple[int, int], int], offsets: np.ndarray, values: list, lengths: np.ndarray
               ) -> tuple[int, int, dict[tuple[int, int], int]]:
    """:func:`judge_partition` over Kafka rows: their offsets, values (a canary record's first 48
    bytes) and whole lengths, decoded by the checker's own decoder (what it does not take for a
    canary record is left out)."""
    cols = decode_values(values, lengths=lengths)
    canary = cols["kind"] == KIND_CANARY
    return judge_partition(carried, np.asarray(offsets)[canary], cols["writer_id"][canary], cols["incarnation"][canary],
                           cols["seq"][canary])


def processor() -> Any:
    """The stateful processor (made here: pyspark is imported only where Spark runs)."""
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor

    class PerPartition(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.last = handle.getValueState("last", "writers string")

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            got = self.last.get() if self.last.exists() else None
            carried = {(int(w), int(i)): s for w, i, s in json.loads(got[0])} if got else {}
            frames = list(rows)  # (the key's rows of this batch, judged at once: in any order)
            frame = pd.concat(frames) if frames else pd.DataFrame({"offset": [], "value": [], "vlen": []})
            reads = len(frame)
            gaps, repeats, carried = judge_rows(carried, frame["offset"].to_numpy(), frame["value"].tolist(),
                                                frame["vlen"].to_numpy())
            self.last.update((json.dumps([[w, i, s] for (w, i), s in carried.items()]),))
            yield pd.DataFrame({"src": [int(key[0])], "partition": [int(key[1])], "reads": [reads],
                                "gaps": [gaps], "repeats": [repeats]}).astype(
                {"src": "int8", "partition": "int32"})

        def close(self) -> None:
            pass

    return PerPartition()


def run_per_partition(spark: Any, cfg: Config, checkpoint: Path) -> dict[str, int]:
    """The whole topic through (d) (module docstring), ``availableNow``: the reads it judged and
    what it found (the bench's pre-fill has no gaps or repeats)."""
    from monitor.watch import spark as spark_job

    found = {"reads": 0, "gaps": 0, "repeats": 0, "batches": 0}

    def count(df: Any, _batch_id: int) -> None:
        for row in df.groupBy().sum("reads", "gaps", "repeats").collect():
            for name in ("reads", "gaps", "repeats"):
                found[name] += int(row[f"sum({name})"] or 0)
        found["batches"] += 1

    previous = spark.conf.get("spark.sql.streaming.stateStore.providerClass", None)
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)  # (transformWithState needs it)
    try:
        rows = spark_job.union_of_sources(spark, cfg, with_ledger=False, headers_only=True).select(
            "src", "partition", "offset", "value", "vlen")
        q = (rows.groupBy("src", "partition").transformWithStateInPandas(
            statefulProcessor=processor(), outputStructType=OUTPUT_DDL, outputMode="Append", timeMode="None")
             .writeStream.foreachBatch(count).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
        q.awaitTermination()
    finally:
        if previous is None:
            spark.conf.unset("spark.sql.streaming.stateStore.providerClass")
        else:
            spark.conf.set("spark.sql.streaming.stateStore.providerClass", previous)
    return found
