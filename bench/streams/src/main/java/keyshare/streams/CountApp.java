package keyshare.streams;

import java.time.Duration;
import java.time.Instant;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * A per-key count in Kafka Streams, with a simulated lookup before each
 * record is counted: the Streams side of make bench-streams.
 *
 * <pre>
 * java -cp 'target/streams-count.jar:target/lib/*' keyshare.streams.CountApp \
 *     --brokers HOST:PORT --input IN --output OUT --app-id ID --threads 1 --state-dir DIR
 * </pre>
 *
 * It reads IN (String keys), waits --lookup-us per record, counts records per
 * key in a persistent key-value store (groupByKey().count(), whose changelog
 * Streams keeps in Kafka), and writes each key's count to OUT (String key,
 * 8-byte big-endian long) as the store's cache flushes on every commit. It
 * prints one line to stdout when its first lookup starts, runs until
 * SIGTERM, then closes Streams (which commits what it processed) and prints
 * another:
 *
 * <pre>
 * first_us F
 * handled N last_us L
 * </pre>
 *
 * F is the Unix µs the first lookup started, N the records whose lookup ran,
 * L the Unix µs the last one ended. --guarantee at_least_once runs it
 * without exactly-once, committing every second (the benchmark's crash run
 * shows what that costs).
 */
public final class CountApp {
    private static final AtomicLong handled = new AtomicLong();
    private static final AtomicLong firstMicros = new AtomicLong();
    private static final AtomicLong lastMicros = new AtomicLong();

    public static void main(String[] argv) throws InterruptedException {
        Map<String, String> a = flags(argv);
        long lookupNanos = Long.parseLong(a.getOrDefault("lookup-us", "5000")) * 1000;

        StreamsBuilder b = new StreamsBuilder();
        b.stream(need(a, "input"), Consumed.with(Serdes.String(), Serdes.String()))
                .peek((k, v) -> lookup(lookupNanos))
                // The key is the record's own, so no repartition topic: each
                // partition's task counts its keys in its own store.
                .groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
                .count(Materialized.as("counts"))
                .toStream()
                .to(need(a, "output"), Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(b.build(), props(a));
        streams.setStateListener((to, from) -> System.err.println("streams: " + from + " -> " + to));
        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(60));
            System.out.printf("handled %d last_us %d%n", handled.get(), lastMicros.get());
            System.out.flush();
            closed.countDown();
        }));
        streams.start();
        closed.await();
    }

    private static Properties props(Map<String, String> a) {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, need(a, "app-id"));
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, need(a, "brokers"));
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, a.getOrDefault("threads", "1"));
        p.put(StreamsConfig.STATE_DIR_CONFIG, need(a, "state-dir"));
        // Exactly once: a crash between a count's update and the input
        // offset's commit would otherwise count the records after the last
        // commit twice, and the benchmark compares exact counts. Under it
        // Streams commits every 100 ms, each commit a Kafka transaction of
        // the task's output, store changelog and input offsets.
        String guarantee = a.getOrDefault("guarantee", StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        if (guarantee.equals(StreamsConfig.AT_LEAST_ONCE)) {
            // Its default is 30 s, which would hold the counts back until
            // the run is nearly over: commit every second, so that the
            // crash run's kill comes between two commits.
            p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 1000);
        }
        if (a.containsKey("cache-bytes")) {
            // 0: every count goes to the store and its changelog at once,
            // not once per commit from the record cache.
            p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, Long.parseLong(a.get("cache-bytes")));
        }
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        return p;
    }

    /** The simulated lookup: a sleep of exactly nanos, timed on the monotonic clock. */
    private static void lookup(long nanos) {
        long start = nowMicros();
        if (firstMicros.compareAndSet(0, start)) {
            // Printed at once: a killed instance prints nothing at its end.
            System.out.printf("first_us %d%n", start);
            System.out.flush();
        }
        long end = System.nanoTime() + nanos;
        for (long left; (left = end - System.nanoTime()) > 0; ) {
            LockSupport.parkNanos(left);
        }
        handled.incrementAndGet();
        lastMicros.accumulateAndGet(nowMicros(), Math::max);
    }

    private static long nowMicros() {
        Instant t = Instant.now();
        return t.getEpochSecond() * 1_000_000 + t.getNano() / 1000;
    }

    private static Map<String, String> flags(String[] argv) {
        Map<String, String> m = new HashMap<>();
        for (int i = 0; i < argv.length; i++) {
            if (!argv[i].startsWith("--") || i + 1 == argv.length) {
                throw new IllegalArgumentException("flag " + argv[i] + ": want --name value");
            }
            m.put(argv[i].substring(2), argv[++i]);
        }
        return m;
    }

    private static String need(Map<String, String> a, String name) {
        String v = a.get(name);
        if (v == null || v.isEmpty()) {
            throw new IllegalArgumentException("--" + name + " is required");
        }
        return v;
    }
}
