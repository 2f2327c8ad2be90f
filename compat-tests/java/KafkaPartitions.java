// Partitioned topics with kafka-clients 3.9.0, for compat-tests/test_partitions.py.
//
// Compiled by the test itself (javac against compat-tests/java/lib/, which build.sh fills);
// run with
//   java -cp '<classes>:compat-tests/java/lib/*' KafkaPartitions <command> ...
//
// Every command prints JSON (one object per line) on stdout and diagnostics on stderr.
// Exit codes: 0 ok, 1 usage, 2 incomplete (fewer records than asked for before the
// deadline), 3 a client call threw (the JSON "error" line on stdout names the exception).
//
// Commands (options may appear anywhere after the command name):
//   admin <bootstrap> <topic> <step>...
//       AdminClient steps, one JSON line each ({"step":..,"ok":true,..} or
//       {"step":..,"error":"<ExceptionClass>","message":..} when the broker refused it):
//         create=N     createTopics with N partitions, replication factor 1
//         grow=N       createPartitions(increaseTo(N))
//         describe     describeTopics: partition ids, leaders, replicas, isr
//         describe=N   the same, retried for up to 15 s until the topic shows N partitions
//                      (a real Kafka propagates a change to its metadata asynchronously)
//   produce <bootstrap> <topic> <n> <keys> [--start S] [--partition P] [--prop key=value]
//       Record i (from S) has key "key-<i % keys>" (null when keys is 0) and value "v-<i>",
//       sent with the default partitioner, or to partition P. Prints
//       {"i":..,"key":..,"partition":..,"offset":..} per record, in index order.
//   group-consume <bootstrap> <topic> <group> <n> [--timeout-ms T] [--prop key=value]
//       KafkaConsumer with group.id=<group> subscribed to <topic>; commitSync after every
//       poll that returned records. Prints {"assigned":[..]} / {"revoked":[..]} from the
//       rebalance listener, {"partition":..,"offset":..,"key":..,"value":..} per record, then
//       {"end":true,"count":..,"assignment":[..],"committed":{"<p>":offset,..}}.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.AdminClient;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class KafkaPartitions {

    private static final long ADMIN_TIMEOUT_S = 30;

    // ------------------------------------------------------------------ args

    private static final class Args {
        final List<String> positional = new ArrayList<>();
        final Map<String, List<String>> options = new HashMap<>();

        Args(String[] argv, int from) {
            for (int i = from; i < argv.length; i++) {
                String a = argv[i];
                if (a.startsWith("--")) {
                    if (i + 1 >= argv.length) {
                        throw new IllegalArgumentException("option " + a + " needs a value");
                    }
                    options.computeIfAbsent(a, k -> new ArrayList<>()).add(argv[++i]);
                } else {
                    positional.add(a);
                }
            }
        }

        String pos(int i, String name) {
            if (i >= positional.size()) {
                throw new IllegalArgumentException("missing argument <" + name + ">");
            }
            return positional.get(i);
        }

        String opt(String name, String dflt) {
            List<String> v = options.get(name);
            return v == null ? dflt : v.get(v.size() - 1);
        }

        void applyProps(Properties p) {
            for (String kv : options.getOrDefault("--prop", Collections.emptyList())) {
                int eq = kv.indexOf('=');
                if (eq <= 0) {
                    throw new IllegalArgumentException("--prop needs key=value, got " + kv);
                }
                p.put(kv.substring(0, eq), kv.substring(eq + 1));
            }
        }
    }

    // ------------------------------------------------------------------ json

    static String q(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
            }
        }
        return b.append('"').toString();
    }

    static String q(byte[] bytes) {
        return bytes == null ? "null" : q(new String(bytes, StandardCharsets.UTF_8));
    }

    static byte[] utf8(String s) {
        return s == null ? null : s.getBytes(StandardCharsets.UTF_8);
    }

    static String errorFields(Throwable t) {
        Throwable cause = t;
        while ((cause instanceof ExecutionException || cause.getClass() == RuntimeException.class)
                && cause.getCause() != null) {
            cause = cause.getCause();
        }
        return "\"error\":" + q(cause.getClass().getName()) + ",\"message\":" + q(String.valueOf(cause.getMessage()));
    }

    static void out(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static String partitionsJson(Collection<TopicPartition> tps) {
        TreeSet<Integer> ids = new TreeSet<>();
        for (TopicPartition tp : tps) {
            ids.add(tp.partition());
        }
        List<String> parts = new ArrayList<>();
        for (int id : ids) {
            parts.add(Integer.toString(id));
        }
        return "[" + String.join(",", parts) + "]";
    }

    // ------------------------------------------------------------------ main

    public static void main(String[] argv) {
        if (argv.length < 1) {
            System.err.println("usage: KafkaPartitions admin|produce|group-consume ...");
            System.exit(1);
        }
        int rc;
        try {
            Args a = new Args(argv, 1);
            switch (argv[0]) {
                case "admin": rc = admin(a); break;
                case "produce": rc = produce(a); break;
                case "group-consume": rc = groupConsume(a); break;
                default:
                    System.err.println("unknown command " + argv[0]);
                    rc = 1;
            }
        } catch (IllegalArgumentException e) {
            System.err.println("usage error: " + e.getMessage());
            rc = 1;
        } catch (Throwable t) {
            out("{" + errorFields(t) + "}");
            t.printStackTrace(System.err);
            rc = 3;
        }
        System.out.flush();
        System.err.flush();
        // kafka-clients leaves non-daemon threads behind on some error paths; do not hang.
        Runtime.getRuntime().halt(rc);
    }

    // ------------------------------------------------------------------ admin

    static String nodeId(Node n) {
        return n == null ? "null" : Integer.toString(n.id());
    }

    static String nodeIds(List<Node> nodes) {
        List<String> ids = new ArrayList<>();
        for (Node n : nodes) {
            ids.add(Integer.toString(n.id()));
        }
        return "[" + String.join(",", ids) + "]";
    }

    static String describe(AdminClient admin, String topic, int want) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        while (true) {
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames()
                    .get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS).get(topic);
            if (want < 0 || d.partitions().size() == want || System.nanoTime() > deadline) {
                List<String> ids = new ArrayList<>();
                List<String> parts = new ArrayList<>();
                for (TopicPartitionInfo pi : d.partitions()) {
                    ids.add(Integer.toString(pi.partition()));
                    parts.add("{\"partition\":" + pi.partition() + ",\"leader\":" + nodeId(pi.leader())
                            + ",\"replicas\":" + nodeIds(pi.replicas()) + ",\"isr\":" + nodeIds(pi.isr()) + "}");
                }
                return "\"ok\":true,\"partition_ids\":[" + String.join(",", ids) + "],\"partitions\":["
                        + String.join(",", parts) + "],\"topic_id\":" + q(String.valueOf(d.topicId()));
            }
            Thread.sleep(100);
        }
    }

    static int admin(Args a) throws Exception {
        String bootstrap = a.pos(0, "bootstrap");
        String topic = a.pos(1, "topic");
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "kafka-partitions-java-admin");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        a.applyProps(p);
        try (AdminClient admin = AdminClient.create(p)) {
            for (int i = 2; i < a.positional.size(); i++) {
                String step = a.positional.get(i);
                String name = step.contains("=") ? step.substring(0, step.indexOf('=')) : step;
                int n = step.contains("=") ? Integer.parseInt(step.substring(step.indexOf('=') + 1)) : -1;
                String body;
                try {
                    switch (name) {
                        case "create":
                            admin.createTopics(List.of(new NewTopic(topic, n, (short) 1)))
                                    .all().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
                            body = "\"ok\":true";
                            break;
                        case "grow":
                            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(n)))
                                    .all().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
                            body = "\"ok\":true";
                            break;
                        case "describe":
                            body = describe(admin, topic, n);
                            break;
                        default:
                            throw new IllegalArgumentException("unknown admin step " + step);
                    }
                } catch (ExecutionException e) {
                    body = errorFields(e);
                }
                out("{\"step\":" + q(step) + "," + body + "}");
            }
        }
        return 0;
    }

    // ------------------------------------------------------------------ produce

    static int produce(Args a) throws Exception {
        String bootstrap = a.pos(0, "bootstrap");
        String topic = a.pos(1, "topic");
        int n = Integer.parseInt(a.pos(2, "n"));
        int keys = Integer.parseInt(a.pos(3, "keys"));
        int start = Integer.parseInt(a.opt("--start", "0"));
        String partition = a.opt("--partition", null);

        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "kafka-partitions-java-producer");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        a.applyProps(p);

        List<String> keyOf = new ArrayList<>(n);
        List<Future<RecordMetadata>> futures = new ArrayList<>(n);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int k = 0; k < n; k++) {
                int i = start + k;
                String key = keys > 0 ? "key-" + (i % keys) : null;
                Integer part = partition == null ? null : Integer.valueOf(partition);
                keyOf.add(key);
                futures.add(producer.send(new ProducerRecord<>(topic, part, utf8(key), utf8("v-" + i))));
            }
            producer.flush();
            for (int k = 0; k < n; k++) {
                RecordMetadata md = futures.get(k).get(40, TimeUnit.SECONDS);
                out("{\"i\":" + (start + k) + ",\"key\":" + q(keyOf.get(k)) + ",\"partition\":" + md.partition()
                        + ",\"offset\":" + md.offset() + "}");
            }
            producer.close(Duration.ofSeconds(10));
        }
        return 0;
    }

    // ------------------------------------------------------------------ group consume

    static int groupConsume(Args a) throws Exception {
        String bootstrap = a.pos(0, "bootstrap");
        String topic = a.pos(1, "topic");
        String group = a.pos(2, "group");
        int n = Integer.parseInt(a.pos(3, "n"));
        long timeoutMs = Long.parseLong(a.opt("--timeout-ms", "40000"));

        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "kafka-partitions-java-consumer");
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "200");
        a.applyProps(p);

        int count = 0;
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    out("{\"revoked\":" + partitionsJson(partitions) + "}");
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    out("{\"assigned\":" + partitionsJson(partitions) + "}");
                }
            });
            while (count < n && System.nanoTime() < deadline) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(250));
                if (records.isEmpty()) {
                    continue;
                }
                Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    out("{\"partition\":" + r.partition() + ",\"offset\":" + r.offset()
                            + ",\"key\":" + q(r.key()) + ",\"value\":" + q(r.value()) + "}");
                    next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    count++;
                }
                consumer.commitSync(next, Duration.ofSeconds(20));
            }
            Map<TopicPartition, OffsetAndMetadata> committed =
                    consumer.committed(consumer.assignment(), Duration.ofSeconds(20));
            TreeMap<Integer, Long> byPartition = new TreeMap<>();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : committed.entrySet()) {
                if (e.getValue() != null) {
                    byPartition.put(e.getKey().partition(), e.getValue().offset());
                }
            }
            List<String> parts = new ArrayList<>();
            for (Map.Entry<Integer, Long> e : byPartition.entrySet()) {
                parts.add(q(Integer.toString(e.getKey())) + ":" + e.getValue());
            }
            out("{\"end\":true,\"count\":" + count + ",\"assignment\":" + partitionsJson(consumer.assignment())
                    + ",\"committed\":{" + String.join(",", parts) + "}}");
            consumer.close(Duration.ofSeconds(5));
        }
        if (count < n) {
            System.err.println("incomplete: got " + count + " of " + n + " records within " + timeoutMs + " ms");
            return 2;
        }
        return 0;
    }
}
