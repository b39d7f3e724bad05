// LeaderMover moves partition leaderships of a running Kafka cluster without
// stopping a broker, for devcluster's MoveLeader. It reads one request a line
// on stdin, "TOPIC PARTITION", and answers one line on stdout:
// "ok FROM TO" or "err MESSAGE". To move a leader it puts another in-sync
// replica first in the partition's replica list (a reassignment to the same
// replicas in another order, which completes at once) and asks for a
// preferred leader election, as kafka-reassign-partitions and
// kafka-leader-election would. Run by `java -cp KAFKA_LIBS/* LeaderMover.java
// BOOTSTRAP` (Java's single-file source launcher).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;

public class LeaderMover {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        try (Admin admin = Admin.create(p)) {
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
            System.out.println("ready");
            System.out.flush();
            String line;
            while ((line = in.readLine()) != null) {
                String[] f = line.trim().split(" ");
                try {
                    System.out.println(move(admin, f[0], Integer.parseInt(f[1])));
                } catch (Exception e) {
                    System.out.println("err " + e.toString().replace('\n', ' '));
                }
                System.out.flush();
            }
        }
    }

    static TopicPartitionInfo describe(Admin admin, String topic, int part) throws Exception {
        return admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().get(part);
    }

    static String move(Admin admin, String topic, int part) throws Exception {
        TopicPartition tp = new TopicPartition(topic, part);
        TopicPartitionInfo info = describe(admin, topic, part);
        if (info.leader() == null) {
            return "err partition " + tp + " has no leader";
        }
        int from = info.leader().id();
        List<Integer> replicas = new ArrayList<>();
        for (Node n : info.replicas()) replicas.add(n.id());
        List<Integer> isr = new ArrayList<>();
        for (Node n : info.isr()) isr.add(n.id());
        // The next in-sync replica after the leader, in replica order.
        int to = -1;
        int at = replicas.indexOf(from);
        for (int i = 1; i < replicas.size() && to < 0; i++) {
            int r = replicas.get((at + i) % replicas.size());
            if (isr.contains(r)) to = r;
        }
        if (to < 0) {
            return "err partition " + tp + " has no in-sync replica but its leader " + from + " (isr " + isr + ")";
        }
        // The new leader first, the old one last: moved again, the
        // leadership goes round every replica.
        List<Integer> order = new ArrayList<>();
        order.add(to);
        for (int r : replicas) if (r != to && r != from) order.add(r);
        order.add(from);
        admin.alterPartitionReassignments(Map.of(tp, Optional.of(new NewPartitionReassignment(order)))).all().get();
        long deadline = System.currentTimeMillis() + 20000;
        while (true) {
            List<Integer> now = new ArrayList<>();
            for (Node n : describe(admin, topic, part).replicas()) now.add(n.id());
            if (now.equals(order)) break;
            if (System.currentTimeMillis() > deadline) return "err replica order of " + tp + " is " + now + ", not " + order + ", after 20 s";
            Thread.sleep(50);
        }
        Optional<Throwable> err = admin.electLeaders(ElectionType.PREFERRED, Set.of(tp)).partitions().get().get(tp);
        if (err != null && err.isPresent()) {
            return "err elect " + tp + ": " + err.get().toString().replace('\n', ' ');
        }
        while (true) {
            Node l = describe(admin, topic, part).leader();
            if (l != null && l.id() == to) break;
            if (System.currentTimeMillis() > deadline) return "err leader of " + tp + " is " + l + ", not " + to + ", after 20 s";
            Thread.sleep(50);
        }
        return "ok " + from + " " + to;
    }
}
