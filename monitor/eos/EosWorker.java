// Vigil's exactly-once pipeline canary: a consume-transform-produce worker on the Java client.
//
// It reads the canary topic in a consumer group (read_committed, no auto commit) and writes, for
// every record it consumed, one output record naming the record's source position, in a
// transaction that also carries the group's offsets (sendOffsetsToTransaction). Every
// `abort_every`-th transaction is aborted on purpose; where the consumer resumes after the abort
// (the first offset its next poll returns, before the worker rewinds: the Jepsen workload of
// KAFKA-17582) is reported, then the worker seeks back to the group's committed offsets, as an
// exactly-once application must, and the records of that poll are read again.
//
// What it saw goes to stdout, one JSON object per line (monitor/eos/worker.py reads it):
//   {"event":"started", ...}  {"event":"assigned"|"revoked","partitions":[...]}
//   {"event":"abort","partition":p,"before":b,"end":e,"after":a,"resumed":r,"resumed_record":true|false,
//    "committed":c,"first":f,"last":l,"records":n}
//   (before: its position when the transaction's poll began, or the committed offset for a
//   partition assigned in that poll; end: its position after that poll; after: its position right
//   after abortTransaction; resumed: the first record's offset the next poll returned there
//   (resumed_record true), else its position after that poll; committed: the group's offset;
//   first, last: the offsets of the aborted poll's first and last records there)
//   {"event":"drill","kind":...} (once applied and committed)  {"event":"progress",...}
//   {"event":"closing"} (the loop ended)  {"event":"closed_call","call":"producer"|"consumer","ms":t}
//   (that client's close() returned after t ms)  {"event":"closed","ms":t} (both, after t ms)
// Diagnostics go to stderr. The end of stdin stops it as SIGTERM does. Drills are files next to `control` (control + ".eos_loss" / ".eos_duplicate"):
// eos_loss leaves the position where the aborted transaction ended (no rewind: the aborted
// records are never written), eos_duplicate writes the first record of the next transaction twice.
//
// Output value (big-endian): "VE" | version 1 | flags (bit 0: drill copy) | source partition (4) |
// source offset (8) | the source value's first 48 bytes (its canary header, when it is one).
//
// Arguments: properties-file input-topic output-topic group-id transactional-id abort-every control
// close-timeout-ms (each client's close is given that long: its runner bounds each call a little longer)
// The properties file holds bootstrap.servers and the security settings, for both clients.

import java.io.FileInputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class EosWorker {
    static final int HEADER = 48;
    static final AtomicBoolean running = new AtomicBoolean(true);
    static Duration closeTimeout = Duration.ofSeconds(20);

    static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static byte[] output(ConsumerRecord<byte[], byte[]> r, boolean drillCopy) {
        byte[] v = r.value() == null ? new byte[0] : r.value();
        int keep = Math.min(HEADER, v.length);
        ByteBuffer b = ByteBuffer.allocate(16 + keep);
        b.put((byte) 'V').put((byte) 'E').put((byte) 1).put((byte) (drillCopy ? 1 : 0));
        b.putInt(r.partition()).putLong(r.offset()).put(v, 0, keep);
        return b.array();
    }

    static boolean takeDrill(String control, String kind) {
        try {
            return Files.deleteIfExists(Paths.get(control + "." + kind));
        } catch (IOException e) {
            return false;
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 8) {
            System.err.println("usage: EosWorker properties input output group transactional-id abort-every control "
                               + "close-timeout-ms");
            System.exit(2);
        }
        Properties common = new Properties();
        try (FileInputStream in = new FileInputStream(args[0])) {
            common.load(in);
        }
        String input = args[1], outputTopic = args[2], group = args[3], txnId = args[4], control = args[6];
        int abortEvery = Integer.parseInt(args[5]);
        closeTimeout = Duration.ofMillis(Long.parseLong(args[7]));

        Properties cp = new Properties();
        cp.putAll(common);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "200");
        // Static membership (KIP-345): a worker restarted within its session takes its partitions
        // back without a rebalance, so a kill -9 costs a restart, not a session timeout.
        cp.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, txnId);
        cp.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
        cp.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "2000");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        Properties pp = new Properties();
        pp.putAll(common);
        pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        // A transaction left open by a killed worker that is not restarted holds the output's LSO
        // (and every read_committed reader) until the coordinator aborts it: 10 s, not a minute.
        pp.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "10000");
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());

        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp);
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp);
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            running.set(false);
            consumer.wakeup();
            try {
                done.await(180, TimeUnit.SECONDS);  // the loop's way out, then close(): bounded, never for ever
            } catch (InterruptedException ignored) {
            }
        }));
        // Its runner holds our stdin open: end of input (the runner gone, even by kill -9) stops us
        // the way SIGTERM does, so no worker outlives the process that watches it.
        Thread orphaned = new Thread(() -> {
            try {
                while (System.in.read() != -1) {
                    // nothing is sent: only the end matters
                }
            } catch (IOException ignored) {
            }
            Runtime.getRuntime().exit(0);
        }, "eos-worker-stdin");
        orphaned.setDaemon(true);
        orphaned.start();
        int exit = 0;
        try {
            producer.initTransactions();
            consumer.subscribe(Collections.singletonList(input), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                    emit("{\"event\":\"revoked\",\"partitions\":" + partitions(parts) + "}");
                }

                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    emit("{\"event\":\"assigned\",\"partitions\":" + partitions(parts) + "}");
                }
            });
            emit("{\"event\":\"started\",\"transactional_id\":\"" + txnId + "\",\"group\":\"" + group + "\"}");
            new EosWorker(consumer, producer, outputTopic, abortEvery, control).loop();
        } catch (WakeupException e) {
            // asked to stop
        } catch (ProducerFencedException e) {
            System.err.println("EosWorker: fenced (a newer instance of " + txnId
                               + ", or the coordinator aborted a transaction past its timeout): " + e);
            exit = 3;
        } catch (Exception e) {  // anything else ends the worker (its runner starts it again); never a hang
            System.err.println("EosWorker: giving up: " + e);
            e.printStackTrace();
            exit = 4;
        } finally {
            emit("{\"event\":\"closing\"}");
            long t0 = System.nanoTime();
            try {
                producer.close(closeTimeout);
            } catch (Exception e) {
                System.err.println("EosWorker: producer close: " + e);
            }
            emit("{\"event\":\"closed_call\",\"call\":\"producer\",\"ms\":" + (System.nanoTime() - t0) / 1_000_000 + "}");
            long t1 = System.nanoTime();
            try {
                consumer.close(closeTimeout);
            } catch (Exception e) {
                System.err.println("EosWorker: consumer close: " + e);
            }
            emit("{\"event\":\"closed_call\",\"call\":\"consumer\",\"ms\":" + (System.nanoTime() - t1) / 1_000_000 + "}");
            emit("{\"event\":\"closed\",\"ms\":" + (System.nanoTime() - t0) / 1_000_000 + "}");
            done.countDown();
        }
        if (running.get()) {  // not a signal: the shutdown hook is not waiting, exit with the reason
            System.exit(exit);
        }
    }

    final KafkaConsumer<byte[], byte[]> consumer;
    final KafkaProducer<byte[], byte[]> producer;
    final String outputTopic, control;
    final int abortEvery;
    long committedTxns = 0, abortedTxns = 0, failedTxns = 0, records = 0, txns = 0;

    EosWorker(KafkaConsumer<byte[], byte[]> consumer, KafkaProducer<byte[], byte[]> producer, String outputTopic,
              int abortEvery, String control) {
        this.consumer = consumer;
        this.producer = producer;
        this.outputTopic = outputTopic;
        this.abortEvery = abortEvery;
        this.control = control;
    }

    /** commitTransaction, again after a timeout (its outcome is then unknown, and Kafka forbids an
     *  abort: the commit must be retried, which completes the one it started). */
    void commit() {
        while (true) {
            try {
                producer.commitTransaction();
                return;
            } catch (TimeoutException e) {
                System.err.println("EosWorker: commit timed out, retrying it: " + e);
                if (!running.get()) {
                    throw e;
                }
            }
        }
    }

    void loop() throws IOException {
        long lastProgress = System.nanoTime();
        while (running.get()) {
            Map<TopicPartition, Long> before = new HashMap<>();
            for (TopicPartition tp : consumer.assignment()) {
                before.put(tp, consumer.position(tp));
            }
            ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(200));
            if (System.nanoTime() - lastProgress > 5_000_000_000L) {
                lastProgress = System.nanoTime();
                emit("{\"event\":\"progress\",\"committed_txns\":" + committedTxns + ",\"aborted_txns\":"
                     + abortedTxns + ",\"failed_txns\":" + failedTxns + ",\"records\":" + records + "}");
            }
            if (batch.isEmpty()) {
                continue;
            }
            txns++;
            // Where the consumer stands after the poll: past the last record returned, and past any
            // control records or aborted records behind it that read_committed skipped.
            Map<TopicPartition, Long> polledTo = new HashMap<>();
            for (TopicPartition tp : batch.partitions()) {
                polledTo.put(tp, consumer.position(tp));
            }
            boolean lossDrill = takeDrill(control, "eos_loss");
            boolean abort = lossDrill || (abortEvery > 0 && txns % abortEvery == 0);
            boolean dupDrill = !abort && takeDrill(control, "eos_duplicate");
            boolean duplicate = dupDrill;
            Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
            ConsumerRecord<byte[], byte[]> dupAt = null;
            try {
                producer.beginTransaction();
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    producer.send(new ProducerRecord<>(outputTopic, r.partition(), null, output(r, false)));
                    if (duplicate) {
                        producer.send(new ProducerRecord<>(outputTopic, r.partition(), null, output(r, true)));
                        dupAt = r;
                        duplicate = false;
                    }
                    next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                producer.sendOffsetsToTransaction(next, consumer.groupMetadata());
                if (!abort) {
                    commit();
                    if (dupAt != null) {
                        emit("{\"event\":\"drill\",\"kind\":\"eos_duplicate\",\"partition\":"
                             + dupAt.partition() + ",\"offset\":" + dupAt.offset() + "}");
                    }
                    committedTxns++;
                    records += batch.count();
                    continue;
                }
                producer.abortTransaction();
                abortedTxns++;
            } catch (ProducerFencedException e) {
                throw e;
            } catch (TimeoutException e) {
                throw e;  // a commit given up on while stopping: its outcome is unknown, no abort allowed
            } catch (KafkaException e) {
                // A failed send, offset commit (rebalance: a stale generation) or commit: abort and
                // resume from the group's committed offsets, like an aborted transaction.
                System.err.println("EosWorker: transaction failed, aborting: " + e);
                failedTxns++;
                producer.abortTransaction();
                abort = false;
                if (lossDrill) {
                    Files.write(Paths.get(control + ".eos_loss"), new byte[0]);  // not applied: next time
                }
                if (dupDrill) {
                    Files.write(Paths.get(control + ".eos_duplicate"), new byte[0]);
                }
            }
            Set<TopicPartition> parts = batch.partitions();
            Map<TopicPartition, Long> after = new HashMap<>();
            Map<TopicPartition, Long> resumed = new HashMap<>();
            Set<TopicPartition> resumedAtRecord = new HashSet<>();  // resumed: a record's offset, not a position
            if (abort) {
                for (TopicPartition tp : parts) {
                    after.put(tp, consumer.position(tp));
                }
                // Where does it resume? One poll, its records put back (seek) whatever it returned.
                ConsumerRecords<byte[], byte[]> peek = consumer.poll(Duration.ofMillis(200));
                Set<TopicPartition> owned = consumer.assignment();
                for (TopicPartition tp : peek.partitions()) {
                    long first = peek.records(tp).get(0).offset();
                    resumed.put(tp, first);
                    resumedAtRecord.add(tp);
                    if (owned.contains(tp)) {
                        consumer.seek(tp, first);
                    }
                }
                for (TopicPartition tp : parts) {
                    if (!resumed.containsKey(tp) && owned.contains(tp)) {
                        resumed.put(tp, consumer.position(tp));
                    }
                }
            }
            Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(parts, Duration.ofSeconds(30));
            boolean skip = abort && lossDrill;
            Set<TopicPartition> owned = consumer.assignment();
            Map<TopicPartition, OffsetAndMetadata> skipped = new HashMap<>();
            List<String> skipEvents = new ArrayList<>();
            for (TopicPartition tp : parts) {
                if (!owned.contains(tp)) {
                    continue;  // revoked meanwhile: its new owner resumes from the committed offset
                }
                List<ConsumerRecord<byte[], byte[]>> rs = batch.records(tp);
                long end = rs.get(rs.size() - 1).offset() + 1;
                OffsetAndMetadata c = committed.get(tp);
                long began = before.containsKey(tp) ? before.get(tp) : (c != null ? c.offset() : rs.get(0).offset());
                long resume = c != null ? c.offset() : began;
                if (abort) {
                    emit("{\"event\":\"abort\",\"partition\":" + tp.partition() + ",\"before\":" + began
                         + ",\"end\":" + polledTo.get(tp) + ",\"after\":" + after.get(tp) + ",\"resumed\":"
                         + resumed.getOrDefault(tp, -1L) + ",\"resumed_record\":" + resumedAtRecord.contains(tp)
                         + ",\"committed\":" + (c == null ? -1 : c.offset()) + ",\"first\":" + rs.get(0).offset()
                         + ",\"last\":" + rs.get(rs.size() - 1).offset() + ",\"records\":" + rs.size() + "}");
                }
                if (skip) {
                    skipEvents.add("{\"event\":\"drill\",\"kind\":\"eos_loss\",\"partition\":" + tp.partition()
                                   + ",\"from\":" + rs.get(0).offset() + ",\"to\":" + end + ",\"records\":"
                                   + rs.size() + "}");
                    skipped.put(tp, new OffsetAndMetadata(end));
                    consumer.seek(tp, end);
                } else {
                    consumer.seek(tp, resume);
                }
            }
            if (!skipped.isEmpty()) {
                // The drill is the application that does not rewind: it commits its position past
                // the aborted records at once (so no later abort's rewind can take the loss back).
                producer.beginTransaction();
                producer.sendOffsetsToTransaction(skipped, consumer.groupMetadata());
                commit();
                skipEvents.forEach(EosWorker::emit);
            }
        }
    }

    static String partitions(Collection<TopicPartition> parts) {
        List<Integer> ps = new ArrayList<>();
        for (TopicPartition tp : parts) {
            ps.add(tp.partition());
        }
        Collections.sort(ps);
        return Arrays.toString(ps.toArray());
    }
}
