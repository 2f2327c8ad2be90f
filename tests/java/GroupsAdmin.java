// Consumer groups through the Java client (kafka-clients 3.9.0), for tests/test_groups_clients.py.
//
//   java -cp '<dir>:compat-tests/java/lib/*' GroupsAdmin <bootstrap> <group> <topic> <n>
//
// A KafkaConsumer joins <group>, reads <n> records of <topic> and commits them; while it is
// still a member the AdminClient lists and describes the groups and lists the group's
// offsets; after the consumer closes the AdminClient alters the offset to 2, reads it back,
// deletes the offset, then the group. One JSON object per step on stdout.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.admin.AdminClient;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

public class GroupsAdmin {
    static String q(String s) {
        if (s == null) return "null";
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static void out(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static String offsets(Map<TopicPartition, OffsetAndMetadata> offsets) {
        List<String> parts = new ArrayList<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
            OffsetAndMetadata o = e.getValue();
            parts.add("{\"topic\":" + q(e.getKey().topic()) + ",\"partition\":" + e.getKey().partition()
                + ",\"offset\":" + (o == null ? -1 : o.offset())
                + ",\"metadata\":" + q(o == null ? null : o.metadata()) + "}");
        }
        return "[" + String.join(",", parts) + "]";
    }

    static String listGroups(AdminClient admin) throws Exception {
        List<String> parts = new ArrayList<>();
        for (ConsumerGroupListing g : admin.listConsumerGroups().all().get()) {
            parts.add("{\"group\":" + q(g.groupId()) + ",\"state\":"
                + q(g.state().map(Object::toString).orElse(null)) + "}");
        }
        return "[" + String.join(",", parts) + "]";
    }

    public static void main(String[] argv) throws Exception {
        String bootstrap = argv[0], group = argv[1], topic = argv[2];
        int n = Integer.parseInt(argv[3]);
        TopicPartition tp = new TopicPartition(topic, 0);

        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.CLIENT_ID_CONFIG, "java-groups");
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, Integer.toString(n));
        cp.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
        cp.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG,
            "org.apache.kafka.common.serialization.StringDeserializer");
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
            "org.apache.kafka.common.serialization.StringDeserializer");

        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        ap.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        ap.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");

        try (AdminClient admin = AdminClient.create(ap)) {
            KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp);
            consumer.subscribe(Collections.singletonList(topic));
            List<Long> seen = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 30000;
            while (seen.size() < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    if (seen.size() < n) seen.add(r.offset());
                }
            }
            consumer.commitSync(Collections.singletonMap(tp, new OffsetAndMetadata(seen.size(), "java")));
            out("{\"step\":\"consumed\",\"offsets\":" + seen + "}");

            out("{\"step\":\"list\",\"groups\":" + listGroups(admin) + "}");

            ConsumerGroupDescription d = admin.describeConsumerGroups(Collections.singletonList(group))
                .all().get().get(group);
            List<String> members = new ArrayList<>();
            for (MemberDescription m : d.members()) {
                List<String> tps = new ArrayList<>();
                for (TopicPartition p : m.assignment().topicPartitions()) tps.add(q(p.toString()));
                members.add("{\"client_id\":" + q(m.clientId()) + ",\"host\":" + q(m.host())
                    + ",\"assignment\":" + tps + "}");
            }
            out("{\"step\":\"describe\",\"state\":" + q(d.state().toString()) + ",\"assignor\":"
                + q(d.partitionAssignor()) + ",\"coordinator\":" + d.coordinator().id()
                + ",\"members\":" + members + "}");

            out("{\"step\":\"offsets\",\"offsets\":" + offsets(
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get()) + "}");

            consumer.close(Duration.ofSeconds(10));

            admin.alterConsumerGroupOffsets(group, Collections.singletonMap(tp, new OffsetAndMetadata(2L)))
                .all().get();
            out("{\"step\":\"altered\",\"offsets\":" + offsets(
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get()) + "}");

            ConsumerGroupDescription empty = admin.describeConsumerGroups(Collections.singletonList(group))
                .all().get().get(group);
            out("{\"step\":\"describe-empty\",\"state\":" + q(empty.state().toString())
                + ",\"members\":" + empty.members().size() + "}");

            admin.deleteConsumerGroupOffsets(group, Collections.singleton(tp)).all().get();
            out("{\"step\":\"offsets-deleted\",\"offsets\":" + offsets(
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get()) + "}");

            admin.deleteConsumerGroups(Collections.singletonList(group)).all().get();
            out("{\"step\":\"deleted\",\"groups\":" + listGroups(admin) + "}");
        }
    }
}
