package keyshare.peers.share;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import keyshare.peers.Flags;
import keyshare.peers.RecordLog;
import keyshare.peers.Work;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * A share-group instance: --concurrency KafkaShareConsumers in one JVM, each
 * on its own thread, each handling one record at a time and acknowledging it
 * (explicit mode) after its work and its record-log line.
 *
 * <pre>
 * ShareDriver run     --brokers B --topic T --group G --log FILE --instance share-0 --concurrency 25
 *                     [--work-max-us 5000] [--block P:O:MS] [--max-poll-records 50] [--acquire-mode record_limit]
 * ShareDriver offsets --brokers B --topic T --group G --partitions 4
 * </pre>
 *
 * run first sets the group's share.auto.offset.reset to earliest (a GROUP
 * config; the default, latest, would skip the records produced in advance).
 * offsets prints, per partition, the share-partition start offset (SPSO: every
 * record below it is acknowledged or archived) and the lag the broker reports.
 */
public final class ShareDriver {
    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            throw new IllegalArgumentException("usage: ShareDriver run|offsets --flag value ...");
        }
        Flags f = new Flags(args, 1);
        switch (args[0]) {
            case "run" -> run(f);
            case "offsets" -> offsets(f);
            default -> throw new IllegalArgumentException("unknown mode " + args[0]);
        }
    }

    static Admin admin(Flags f) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, f.get("brokers"));
        return Admin.create(p);
    }

    static void run(Flags f) throws Exception {
        String topic = f.get("topic"), group = f.get("group");
        try (Admin a = admin(f)) {
            ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
            a.incrementalAlterConfigs(Map.of(res, List.of(new AlterConfigOp(
                    new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET)))).all().get();
        }
        Work work = new Work(Long.parseLong(f.get("work-max-us", "5000")), f.get("block", ""));
        String logPath = f.get("log"), instance = f.get("instance");
        int n = f.integer("concurrency", 100);
        AtomicBoolean running = new AtomicBoolean(true);
        AtomicLong confirmed = new AtomicLong(), failed = new AtomicLong();
        List<Thread> threads = new ArrayList<>();
        List<RecordLog> logs = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            Properties p = new Properties();
            p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, f.get("brokers"));
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            p.put(ConsumerConfig.CLIENT_ID_CONFIG, f.get("instance") + "-" + i);
            p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            p.put(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG, "explicit");
            // In the default batch_optimized mode a consumer acquires whole
            // producer batches (up to 500 records) and runs them one by one
            // while others idle; with record_limit, at most
            // max.poll.records. 50 had the best steady rate of 1, 10, 50 and
            // 500 in a 4,000-record trial here (PEERS_SHARE_ARGS to change).
            p.put(ConsumerConfig.SHARE_ACQUIRE_MODE_CONFIG, f.get("acquire-mode", "record_limit"));
            p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, f.get("max-poll-records", "50"));
            // One log per JVM; the instance column names the consumer too
            // (instance.i), which shows how evenly the records spread.
            RecordLog log = new RecordLog(logPath, instance + "." + i);
            logs.add(log);
            Thread t = new Thread(() -> consume(p, topic, work, log, running, confirmed, failed), "share-" + i);
            t.start();
            threads.add(t);
        }
        Thread main = Thread.currentThread();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            running.set(false);
            for (Thread t : threads) {
                try {
                    t.join(30_000);
                } catch (InterruptedException e) {
                    return;
                }
            }
            System.out.println("acknowledgements confirmed " + confirmed.get() + " failed " + failed.get());
            System.out.flush();
            for (RecordLog log : logs) {
                try {
                    log.close();
                } catch (Exception e) {
                    System.err.println("share driver: " + e);
                }
            }
        }));
        for (Thread t : threads) {
            t.join();
        }
    }

    static void consume(Properties p, String topic, Work work, RecordLog log, AtomicBoolean running,
            AtomicLong confirmed, AtomicLong failed) {
        try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p)) {
            // The broker's answer to every acknowledgement: what the
            // benchmark reports as "all acknowledged".
            c.setAcknowledgementCommitCallback((offsets, e) -> {
                long n = offsets.values().stream().mapToLong(java.util.Set::size).sum();
                (e == null ? confirmed : failed).addAndGet(n);
            });
            c.subscribe(List.of(topic));
            while (running.get()) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                    long start = Work.nowMicros();
                    work.run(r.partition(), r.offset());
                    int attempt = r.deliveryCount().map(Short::intValue).orElse(1);
                    log.write(r.topic(), r.partition(), r.offset(), r.key(), attempt, start, Work.nowMicros());
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                c.commitAsync();
            }
            c.commitSync(Duration.ofSeconds(10));
        } catch (Exception e) {
            if (running.get()) {
                System.err.println("share consumer: " + e);
            }
        }
    }

    static void offsets(Flags f) throws Exception {
        String topic = f.get("topic"), group = f.get("group");
        List<TopicPartition> tps = new ArrayList<>();
        for (int i = 0; i < f.integer("partitions", 1); i++) {
            tps.add(new TopicPartition(topic, i));
        }
        try (Admin a = admin(f)) {
            Map<TopicPartition, SharePartitionOffsetInfo> m = a.listShareGroupOffsets(
                    Map.of(group, new ListShareGroupOffsetsSpec().topicPartitions(tps))).partitionsToOffsetInfo(group).get();
            for (TopicPartition tp : tps) {
                SharePartitionOffsetInfo info = m.get(tp);
                System.out.println(tp.partition() + "\t" + (info == null ? -1 : info.startOffset())
                        + "\t" + (info == null ? "" : info.lag().map(String::valueOf).orElse("")));
            }
        }
    }
}
