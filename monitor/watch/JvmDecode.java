import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.Iterator;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.TreeMap;
import java.util.zip.CRC32;

import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.types.StructType;

/**
 * The executors' decoding of monitor/watch/executor.py (decode_batch), done in Spark's JVM
 * (watch.decode_on: jvm): the canary records' headers decoded and cut into runs where each Spark
 * partition (one offset range of one topic-partition of one reader, in offset order) was read, so
 * no row per record crosses into Python. The same rows, columns and rules as decode_batch: a run
 * row per stretch of one writer incarnation's records at consecutive offsets and seqs (one
 * transaction's, indexes a constant step apart), a row per record that is not a well-formed
 * canary one (its kind, the CRC-32 and length of its whole value), a row per ledger, EOS output
 * or group observation record with its value, and latency rows (canary records per age bin).
 * Runs may be cut at other places than the Python decoder cuts them (it cuts at its Arrow
 * batches too); expanded, they are the same records. tests/integration/test_jvm_decode.py holds
 * the two to that over random rows.
 */
public final class JvmDecode implements MapPartitionsFunction<Row, Row> {
  static final int HEADER_SIZE = 48;
  static final byte KIND_LEDGER = -1, KIND_CANARY = 0, KIND_FOREIGN = 1, KIND_MALFORMED = 2, KIND_LATENCY = 3;
  static final int SRC_LEDGER = 2;
  static final int FLAG_INTENDED_ABORT = 0x02, KNOWN_FLAGS = 0x07;
  static final String[] INPUT = {"src", "partition", "offset", "value", "vlen", "vcrc", "ts_us"};

  private final String[] topics;  // by src
  private final double[] edges;   // latency bin k >= 1 starts at edges[k - 1] (µs)
  private final long fixedNowUs;  // > 0: the decoding time (tests); else the clock at a partition's start

  JvmDecode(String[] topics, double[] edges, long fixedNowUs) {
    this.topics = topics;
    this.edges = edges;
    this.fixedNowUs = fixedNowUs;
  }

  /** The decoded rows of df (columns INPUT, as monitor.watch.spark.union_of_sources gives them with
   * headers_only); topics: each src's topic, comma-separated in src order; edges: the latency bins'
   * lower edges, comma-separated (exact decimal forms of the doubles); ddl: the output schema. */
  public static Dataset<Row> decode(Dataset<Row> df, String topics, String edges, long fixedNowUs, String ddl) {
    String[] parts = edges.split(",");
    double[] bounds = new double[parts.length];
    for (int i = 0; i < parts.length; i++) {
      bounds[i] = Double.parseDouble(parts[i]);
    }
    StructType schema = StructType.fromDDL(ddl);
    // (select by name, not by SQL expression: partition and offset are SQL keywords)
    return df.select(INPUT[0], Arrays.copyOfRange(INPUT, 1, INPUT.length))
        .mapPartitions(new JvmDecode(topics.split(",", -1), bounds, fixedNowUs), Encoders.row(schema));
  }

  /** One record's decoded columns (zeros where it is not a well-formed canary record). */
  private static final class Rec {
    byte src, kind;
    int partition, txnSize, txnIndex, length;
    long offset, writerId, incarnation, seq, produceTsUs, txnId, digest;
    short flags;
    Long tsUs;
    byte[] kept;  // the value of a ledger, EOS output or group observation row
    boolean canary, abort;
  }

  @Override
  public Iterator<Row> call(Iterator<Row> rows) {
    return new Decoded(rows, fixedNowUs > 0 ? fixedNowUs : System.currentTimeMillis() * 1000L);
  }

  /** The decoded rows of one partition, each run handed on as soon as it ends (a partition's rows
   * are not held: a batch may bring maxOffsetsPerTrigger ledger values or foreign records). */
  private final class Decoded implements Iterator<Row> {
    private final Iterator<Row> rows;
    private final long nowUs;
    private final ArrayDeque<Row> ready = new ArrayDeque<>();
    private final TreeMap<Long, Integer> latency = new TreeMap<>();
    private Rec start, prev;
    private Long newest;  // the run's newest record timestamp (null: none of its records has one)
    private int count, step;
    private boolean prevBase;  // whether prev continued the record before it (before the step rule; false
                               // for a partition's first two rows, as the step rule wants)
    private long prevDiff;     // prev's txn_index minus the one before it
    private boolean done;

    Decoded(Iterator<Row> rows, long nowUs) {
      this.rows = rows;
      this.nowUs = nowUs;
    }

    @Override
    public boolean hasNext() {
      fill();
      return !ready.isEmpty();
    }

    @Override
    public Row next() {
      fill();
      if (ready.isEmpty()) {
        throw new NoSuchElementException();
      }
      return ready.poll();
    }

    private void fill() {
      while (ready.isEmpty() && !done) {
        if (rows.hasNext()) {
          take(decodeRow(rows.next()));
        } else {
          finish();
          done = true;
        }
      }
    }

    private void take(Rec r) {
      boolean base = prev != null && r.canary && prev.canary && r.src == prev.src && r.partition == prev.partition
          && r.offset == prev.offset + 1 && r.writerId == prev.writerId && r.incarnation == prev.incarnation
          && prev.seq != -1L && r.seq == prev.seq + 1 && r.txnId == prev.txnId && r.abort == prev.abort
          && r.txnSize == prev.txnSize;
      long diff = prev == null ? 0 : (long) r.txnIndex - prev.txnIndex;
      boolean follows = base && (!prevBase || diff == prevDiff);
      if (follows) {
        if (count == 1) {
          step = r.txnIndex - start.txnIndex;
        }
        count++;
        if (r.tsUs != null && (newest == null || r.tsUs > newest)) {
          newest = r.tsUs;
        }
      } else {
        if (start != null) {
          ready.add(runRow(start, count, step, newest));
        }
        start = r;
        newest = r.tsUs;
        count = 1;
        step = 0;
      }
      if (r.canary) {
        long key = r.src * 1_000_000L + bin((double) (nowUs - r.produceTsUs));
        latency.merge(key, 1, Integer::sum);
      }
      prevBase = base;
      prevDiff = diff;
      prev = r;
    }

    private void finish() {
      if (start != null) {
        ready.add(runRow(start, count, step, newest));
      }
      for (Map.Entry<Long, Integer> e : latency.entrySet()) {
        long key = e.getKey();
        ready.add(RowFactory.create((byte) (key / 1_000_000L), null, -1, key % 1_000_000L, nowUs, null, KIND_LATENCY,
                                    0L, 0L, 0L, 0L, 0L, (short) 0, 0, 0, 0L, 0, e.getValue(), 0));
      }
    }
  }

  /** How many edges are at or below age: 0 below the first (1 ms), as executor.latency_bin. */
  private int bin(double age) {
    int lo = 0, hi = edges.length;
    while (lo < hi) {
      int mid = (lo + hi) >>> 1;
      if (edges[mid] <= age) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }

  /** A run's row: its first record's fields, its newest record's timestamp (the ledger hold's). */
  private Row runRow(Rec s, int count, int step, Long newestTsUs) {
    return RowFactory.create(s.src, topics[s.src], s.partition, s.offset, newestTsUs, s.kept, s.kind, s.writerId,
                             s.incarnation, s.seq, s.produceTsUs, s.txnId, s.flags, s.txnSize, s.txnIndex, s.digest,
                             s.length, count, step);
  }

  /** decode_values of one row: the rules of monitor.record_format.decode_header_rows. */
  static Rec decodeRow(Row row) {
    Rec r = new Rec();
    r.src = row.getByte(0);
    r.partition = row.getInt(1);
    r.offset = row.getLong(2);
    byte[] v = row.isNullAt(3) ? null : (byte[]) row.get(3);
    r.tsUs = row.isNullAt(6) ? null : row.getLong(6);
    boolean skip = r.src >= SRC_LEDGER;
    int held = v == null ? -1 : v.length;
    long whole = row.isNullAt(4) ? -1 : row.getInt(4);
    long size = held < 0 ? -1 : (whole >= 0 ? whole : held);  // the whole value's length (-1: null)
    boolean valid = false;
    if (held >= HEADER_SIZE && size >= HEADER_SIZE && v[0] == 'V' && v[1] == 'G' && v[2] == 1
        && (v[3] & ~KNOWN_FLAGS) == 0) {
      long txnId = be(v, 32, 8);
      int txnSize = (int) be(v, 40, 2), txnIndex = (int) be(v, 42, 2);
      valid = size == HEADER_SIZE + be(v, 44, 4) && (txnId != 0 || (txnSize == 0 && txnIndex == 0))
          && (txnId == 0 || txnIndex < txnSize);
      if (valid) {  // (a ledger row's too, as decode_header_rows does: only its kind and digest differ)
        r.flags = (short) (v[3] & 0xff);
        r.writerId = be(v, 4, 8);
        r.incarnation = be(v, 12, 4);
        r.seq = be(v, 16, 8);
        r.produceTsUs = be(v, 24, 8);
        r.txnId = txnId;
        r.txnSize = txnSize;
        r.txnIndex = txnIndex;
      }
    }
    if (skip) {
      r.kind = KIND_LEDGER;
      r.kept = v;
      return r;
    }
    r.length = size < 0 ? 0 : (int) size;
    if (valid) {
      r.kind = KIND_CANARY;
      r.canary = true;
      r.abort = (r.flags & FLAG_INTENDED_ABORT) != 0;
      return r;
    }
    r.kind = size >= 2 && held >= 2 && v[0] == 'V' && v[1] == 'G' ? KIND_MALFORMED : KIND_FOREIGN;
    if (size > 0) {
      if (!row.isNullAt(5)) {
        r.digest = row.getLong(5);
      } else {
        CRC32 crc = new CRC32();
        crc.update(v, 0, held);
        r.digest = crc.getValue();
      }
    }
    return r;
  }

  /** n bytes of v from at, big-endian, as the same bits in a long. */
  static long be(byte[] v, int at, int n) {
    long x = 0;
    for (int i = at; i < at + n; i++) {
      x = (x << 8) | (v[i] & 0xffL);
    }
    return x;
  }
}
