package keyshare.peers.pc;

import io.confluent.parallelconsumer.ParallelConsumerOptions;
import io.confluent.parallelconsumer.ParallelConsumerOptions.ProcessingOrder;
import io.confluent.parallelconsumer.ParallelStreamProcessor;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import keyshare.peers.Flags;
import keyshare.peers.RecordLog;
import keyshare.peers.Work;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * One Confluent Parallel Consumer instance in KEY order, handling records
 * with the shared work function and writing the record log. It runs until
 * SIGTERM, then closes (which commits what is done) and exits.
 *
 * <pre>
 * java -cp 'pc/target/peers-pc.jar:pc/target/lib/*' keyshare.peers.pc.PcDriver \
 *   --brokers HOST:PORT --topic T --group G --log FILE --instance pc-0 \
 *   --concurrency 100 --work-max-us 5000 [--block P:O:MS]
 * </pre>
 */
public final class PcDriver {
    public static void main(String[] args) throws Exception {
        Flags f = new Flags(args, 0);
        String topic = f.get("topic");
        Work work = new Work(Long.parseLong(f.get("work-max-us", "5000")), f.get("block", ""));
        RecordLog log = new RecordLog(f.get("log"), f.get("instance"));

        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, f.get("brokers"));
        p.put(ConsumerConfig.GROUP_ID_CONFIG, f.get("group"));
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, f.get("instance"));
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false"); // Parallel Consumer commits itself
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        // The classic protocol's broker minimum; the default 45 s would hold
        // a killed instance's partitions that long.
        p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, f.get("session-timeout-ms", "6000"));
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p);

        ParallelConsumerOptions<String, String> opts = ParallelConsumerOptions.<String, String>builder()
                .ordering(ProcessingOrder.KEY)
                .maxConcurrency(f.integer("concurrency", 100))
                .consumer(consumer)
                .build();
        ParallelStreamProcessor<String, String> pc = ParallelStreamProcessor.createEosStreamProcessor(opts);

        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                pc.close();
                log.close();
            } catch (Exception e) {
                System.err.println("pc driver: close: " + e);
            } finally {
                closed.countDown();
            }
        }));

        pc.subscribe(List.of(topic));
        pc.poll(ctx -> {
            ConsumerRecord<String, String> r = ctx.getSingleConsumerRecord();
            int attempt = ctx.getSingleRecord().getNumberOfFailedAttempts() + 1;
            long start = Work.nowMicros();
            work.run(r.partition(), r.offset());
            log.write(r.topic(), r.partition(), r.offset(), r.key(), attempt, start, Work.nowMicros());
        });
        closed.await();
    }
}
