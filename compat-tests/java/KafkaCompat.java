// Kafka compatibility driver for tmsgate's compat-tests, built on kafka-clients 3.9.0
// (the client library Spark 4.0's Kafka connector runs on).
//
// Build with compat-tests/java/build.sh (plain javac, no Maven); run with
//   java -cp 'compat-tests/java/build:compat-tests/java/lib/*' KafkaCompat <command> ...
//
// Every command prints JSON (one object per line) on stdout and diagnostics on stderr.
// Exit codes: 0 ok, 1 usage, 2 incomplete (fewer records than asked for before the
// deadline), 3 a client call threw (the JSON "error" line on stdout names the exception).
//
// Commands (options may appear anywhere after the command name):
//   produce <bootstrap> <topic> <n> <codec>
//       [--start S]            first record index (default 0); record i carries
//                              key "k-<i>", value "v-<i>-<codec>-<padding>", headers
//                              idx=<i>, hk=hv-<i>
//       [--null-key-every K]   key is null when i % K == 0
//       [--null-value-every K] value is null when i % K == 0
//       [--null-header]        add a header "hnull" with a null value
//       [--value-size N]       pad values to at least N bytes (compressible text)
//       [--timestamp T]        explicit record timestamp (CreateTime) for every record
//       [--prop key=value]     extra producer property (repeatable)
//     prints {"i":..,"partition":..,"offset":..,"timestamp":..} per record, in index order.
//   consume <bootstrap> <topic> <from-offset> <n> [read_committed]
//       [--timeout-ms T] (default 30000) [--prop key=value]
//       [--pause-after K --pause-file F]  after K records create F, wait until it is deleted
//     KafkaConsumer without group.id: assign + seek + poll. Prints per record
//     {"offset":..,"key":..,"value":..,"headers":[[k,v],..],"timestamp":..,"timestamp_type":..}
//     then a final {"end":true,"position":..,"count":..}.
//   consumer-offsets <bootstrap> <topic> [read_committed] [--timestamp T]
//     KafkaConsumer seekToBeginning/position, seekToEnd/position, beginningOffsets, endOffsets,
//     offsetsForTimes (what Spark's KafkaDataConsumer uses to find the available range).
//     Prints {"beginning":..,"end":..,"beginning_offsets":..,"end_offsets":..,"for_timestamp":..}.
//   admin <bootstrap> <topic> [--no-create] [--timestamp T] [--partitions P]
//     AdminClient createTopics, describeTopics, listOffsets(earliest, latest, [forTimestamp T])
//     with IsolationLevel.READ_COMMITTED. Prints one JSON object.
//   offsets <bootstrap> <topic> [--timestamp T] [read_uncommitted]
//     Like admin without the create and describe.
//   create <bootstrap> <topic> <partitions> [--config key=value]...
//   delete <bootstrap> <topic>
//   list <bootstrap>
//   describe-configs <bootstrap> <topic>
//     Each prints one JSON object; an error reply is reported as {"error": "<ExceptionClass>",
//     "message": ...} with exit code 0 (the caller asserts on it), a local failure exits 3.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.AdminClient;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class KafkaCompat {

    private static final long ADMIN_TIMEOUT_S = 30;

    // ------------------------------------------------------------------ args

    private static final class Args {
        final List<String> positional = new ArrayList<>();
        final Map<String, List<String>> options = new HashMap<>();
        final Set<String> flags = new java.util.HashSet<>();

        static final Set<String> FLAG_NAMES = Set.of("--null-header", "--no-create");

        Args(String[] argv, int from) {
            for (int i = from; i < argv.length; i++) {
                String a = argv[i];
                if (FLAG_NAMES.contains(a)) {
                    flags.add(a);
                } else if (a.startsWith("--")) {
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

        List<String> all(String name) {
            return options.getOrDefault(name, Collections.emptyList());
        }

        boolean hasPositional(String word) {
            return positional.contains(word);
        }

        void applyProps(Properties p) {
            for (String kv : all("--prop")) {
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

    static String errorJson(Throwable t) {
        Throwable cause = t;
        while ((cause instanceof ExecutionException || cause.getClass() == RuntimeException.class)
                && cause.getCause() != null) {
            cause = cause.getCause();
        }
        // The causes too: a producer in an error state throws "Cannot execute transactional
        // method because we are in an error state" with the refusal as its cause.
        StringBuilder causes = new StringBuilder();
        int n = 0;
        for (Throwable c = cause.getCause(); c != null && c != cause && n < 8; c = c.getCause(), n++) {
            causes.append(n == 0 ? "" : ",").append(q(c.getClass().getName()));
        }
        return "{\"error\":" + q(cause.getClass().getName()) + ",\"message\":" + q(String.valueOf(cause.getMessage()))
                + (n == 0 ? "" : ",\"causes\":[" + causes + "]") + "}";
    }

    static void out(String line) {
        System.out.println(line);
        System.out.flush();
    }

    // ------------------------------------------------------------------ main

    public static void main(String[] argv) {
        if (argv.length < 1) {
            System.err.println("usage: KafkaCompat produce|consume|admin|offsets|create|delete|list|describe-configs ...");
            System.exit(1);
        }
        int rc;
        try {
            Args a = new Args(argv, 1);
            switch (argv[0]) {
                case "produce": rc = produce(a); break;
                case "consume": rc = consume(a); break;
                case "consumer-offsets": rc = consumerOffsets(a); break;
                case "admin": rc = admin(a, true); break;
                case "offsets": rc = admin(a, false); break;
                case "create": rc = create(a); break;
                case "delete": rc = delete(a); break;
                case "list": rc = list(a); break;
                case "describe-configs": rc = describeConfigs(a); break;
                default:
                    System.err.println("unknown command " + argv[0]);
                    rc = 1;
            }
        } catch (IllegalArgumentException e) {
            System.err.println("usage error: " + e.getMessage());
            rc = 1;
        } catch (Throwable t) {
            out(errorJson(t));
            t.printStackTrace(System.err);
            rc = 3;
        }
        System.out.flush();
        System.err.flush();
        // kafka-clients leaves non-daemon threads behind on some error paths; do not hang.
        Runtime.getRuntime().halt(rc);
    }

    // ------------------------------------------------------------------ produce

    static String padding(int i, String codec, int size) {
        StringBuilder b = new StringBuilder("v-").append(i).append('-').append(codec);
        if (b.length() < size) {
            b.append('-');
            String unit = "lorem ipsum dolor sit amet " + (i % 7) + " ";
            while (b.length() < size) {
                b.append(unit);
            }
            b.setLength(size);
        }
        return b.toString();
    }

    static int produce(Args a) throws Exception {
        String bootstrap = a.pos(0, "bootstrap");
        String topic = a.pos(1, "topic");
        int n = Integer.parseInt(a.pos(2, "n"));
        String codec = a.pos(3, "codec");
        int start = Integer.parseInt(a.opt("--start", "0"));
        int nullKeyEvery = Integer.parseInt(a.opt("--null-key-every", "0"));
        int nullValueEvery = Integer.parseInt(a.opt("--null-value-every", "0"));
        int valueSize = Integer.parseInt(a.opt("--value-size", "0"));
        String ts = a.opt("--timestamp", null);
        boolean nullHeader = a.flags.contains("--null-header");

        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "kafka-compat-java-producer");
        // Bounded waits so a misbehaving broker fails the test instead of hanging it.
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        a.applyProps(p);

        List<Future<RecordMetadata>> futures = new ArrayList<>(n);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int k = 0; k < n; k++) {
                int i = start + k;
                String key = (nullKeyEvery > 0 && i % nullKeyEvery == 0) ? null : "k-" + i;
                String value = (nullValueEvery > 0 && i % nullValueEvery == 0) ? null : padding(i, codec, valueSize);
                RecordHeaders headers = new RecordHeaders();
                headers.add(new RecordHeader("idx", utf8(Integer.toString(i))));
                headers.add(new RecordHeader("hk", utf8("hv-" + i)));
                if (nullHeader) {
                    headers.add(new RecordHeader("hnull", (byte[]) null));
                }
                Long timestamp = ts == null ? null : Long.parseLong(ts);
                futures.add(producer.send(new ProducerRecord<>(topic, null, timestamp, utf8(key), utf8(value), headers)));
            }
            producer.flush();
            for (int k = 0; k < n; k++) {
                RecordMetadata md = futures.get(k).get(40, TimeUnit.SECONDS);
                out("{\"i\":" + (start + k) + ",\"partition\":" + md.partition() + ",\"offset\":" + md.offset()
                        + ",\"timestamp\":" + md.timestamp() + "}");
            }
            producer.close(Duration.ofSeconds(10));
        }
        return 0;
    }

    // ------------------------------------------------------------------ consume

    static String headersJson(Iterable<Header> headers) {
        StringBuilder b = new StringBuilder("[");
        boolean first = true;
        for (Header h : headers) {
            if (!first) {
                b.append(',');
            }
            first = false;
            b.append('[').append(q(h.key())).append(',').append(q(h.value())).append(']');
        }
        return b.append(']').toString();
    }

    static int consume(Args a) throws Exception {
        String bootstrap = a.pos(0, "bootstrap");
        String topic = a.pos(1, "topic");
        long from = Long.parseLong(a.pos(2, "from-offset"));
        int n = Integer.parseInt(a.pos(3, "n"));
        boolean readCommitted = a.hasPositional("read_committed");
        long timeoutMs = Long.parseLong(a.opt("--timeout-ms", "30000"));
        // --pause-after K --pause-file F: after K records, create F and wait (polling nothing)
        // until F is deleted, then go on with the same consumer -- lets a test restart the
        // broker under a live consumer.
        int pauseAfter = Integer.parseInt(a.opt("--pause-after", "-1"));
        String pauseFile = a.opt("--pause-file", null);

        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "kafka-compat-java-consumer");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, readCommitted ? "read_committed" : "read_uncommitted");
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "200");
        a.applyProps(p);

        TopicPartition tp = new TopicPartition(topic, 0);
        int count = 0;
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            consumer.assign(Collections.singletonList(tp));
            consumer.seek(tp, from);
            boolean paused = false;
            while (count < n && System.nanoTime() < deadline) {
                if (!paused && pauseFile != null && count >= pauseAfter) {
                    paused = true;
                    java.nio.file.Path pf = java.nio.file.Paths.get(pauseFile);
                    java.nio.file.Files.write(pf, new byte[0]);
                    while (java.nio.file.Files.exists(pf) && System.nanoTime() < deadline) {
                        Thread.sleep(50);
                    }
                }
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(250));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    if (count >= n) {
                        break; // print exactly n; "position" below shows how far the consumer got
                    }
                    out("{\"offset\":" + r.offset() + ",\"partition\":" + r.partition()
                            + ",\"key\":" + q(r.key()) + ",\"value\":" + q(r.value())
                            + ",\"headers\":" + headersJson(r.headers())
                            + ",\"timestamp\":" + r.timestamp()
                            + ",\"timestamp_type\":" + q(r.timestampType().name) + "}");
                    count++;
                }
            }
            long position = consumer.position(tp, Duration.ofSeconds(10));
            out("{\"end\":true,\"position\":" + position + ",\"count\":" + count + "}");
            consumer.close(Duration.ofSeconds(5));
        }
        if (count < n) {
            System.err.println("incomplete: got " + count + " of " + n + " records within " + timeoutMs + " ms");
            return 2;
        }
        return 0;
    }

    static int consumerOffsets(Args a) throws Exception {
        String bootstrap = a.pos(0, "bootstrap");
        String topic = a.pos(1, "topic");
        boolean readCommitted = a.hasPositional("read_committed");
        String ts = a.opt("--timestamp", null);
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "kafka-compat-java-consumer");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, readCommitted ? "read_committed" : "read_uncommitted");
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        a.applyProps(p);
        TopicPartition tp = new TopicPartition(topic, 0);
        Duration t = Duration.ofSeconds(20);
        StringBuilder b = new StringBuilder("{");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            consumer.assign(Collections.singletonList(tp));
            consumer.seekToBeginning(Collections.singletonList(tp));
            b.append("\"beginning\":").append(consumer.position(tp, t));
            consumer.seekToEnd(Collections.singletonList(tp));
            b.append(",\"end\":").append(consumer.position(tp, t));
            b.append(",\"beginning_offsets\":").append(consumer.beginningOffsets(List.of(tp), t).get(tp));
            b.append(",\"end_offsets\":").append(consumer.endOffsets(List.of(tp), t).get(tp));
            if (ts != null) {
                org.apache.kafka.clients.consumer.OffsetAndTimestamp oat =
                        consumer.offsetsForTimes(Map.of(tp, Long.parseLong(ts)), t).get(tp);
                b.append(",\"for_timestamp\":").append(oat == null ? "null"
                        : "{\"offset\":" + oat.offset() + ",\"timestamp\":" + oat.timestamp() + "}");
            }
            consumer.close(Duration.ofSeconds(5));
        }
        out(b.append('}').toString());
        return 0;
    }

    // ------------------------------------------------------------------ admin

    static AdminClient adminClient(Args a) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, a.pos(0, "bootstrap"));
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "kafka-compat-java-admin");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        a.applyProps(p);
        return AdminClient.create(p);
    }

    static String nodeJson(Node n) {
        if (n == null) {
            return "null";
        }
        return "{\"id\":" + n.id() + ",\"host\":" + q(n.host()) + ",\"port\":" + n.port() + "}";
    }

    static String nodesJson(List<Node> nodes) {
        List<String> parts = new ArrayList<>();
        for (Node n : nodes) {
            parts.add(Integer.toString(n.id()));
        }
        return "[" + String.join(",", parts) + "]";
    }

    /** Runs one admin call; returns its JSON, or an {"error":..} object if the broker refused it. */
    interface AdminCall {
        String run() throws Exception;
    }

    static String attempt(AdminCall call) throws Exception {
        try {
            return call.run();
        } catch (ExecutionException e) {
            return errorJson(e);
        }
    }

    static String listOffsetsJson(AdminClient admin, TopicPartition tp, OffsetSpec spec, IsolationLevel iso)
            throws Exception {
        return attempt(() -> {
            ListOffsetsResult res = admin.listOffsets(Map.of(tp, spec), new ListOffsetsOptions(iso));
            ListOffsetsResult.ListOffsetsResultInfo info = res.partitionResult(tp).get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
            return "{\"offset\":" + info.offset() + ",\"timestamp\":" + info.timestamp()
                    + ",\"leader_epoch\":" + info.leaderEpoch().map(String::valueOf).orElse("null") + "}";
        });
    }

    static int admin(Args a, boolean full) throws Exception {
        String topic = a.pos(1, "topic");
        String ts = a.opt("--timestamp", null);
        int partitions = Integer.parseInt(a.opt("--partitions", "1"));
        IsolationLevel iso = a.hasPositional("read_uncommitted") ? IsolationLevel.READ_UNCOMMITTED
                : IsolationLevel.READ_COMMITTED;
        TopicPartition tp = new TopicPartition(topic, 0);
        StringBuilder b = new StringBuilder("{\"topic\":").append(q(topic));
        try (AdminClient admin = adminClient(a)) {
            if (full && !a.flags.contains("--no-create")) {
                String created = attempt(() -> {
                    CreateTopicsResult r = admin.createTopics(
                            List.of(new NewTopic(topic, partitions, (short) 1)));
                    r.all().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
                    return "{\"ok\":true,\"topic_id\":" + q(String.valueOf(r.topicId(topic).get())) + "}";
                });
                b.append(",\"create\":").append(created);
            }
            if (full) {
                String described = attempt(() -> {
                    Map<String, TopicDescription> m = admin.describeTopics(List.of(topic))
                            .allTopicNames().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
                    TopicDescription d = m.get(topic);
                    StringBuilder pb = new StringBuilder("[");
                    boolean first = true;
                    for (TopicPartitionInfo pi : d.partitions()) {
                        if (!first) {
                            pb.append(',');
                        }
                        first = false;
                        pb.append("{\"partition\":").append(pi.partition())
                          .append(",\"leader\":").append(nodeJson(pi.leader()))
                          .append(",\"replicas\":").append(nodesJson(pi.replicas()))
                          .append(",\"isr\":").append(nodesJson(pi.isr())).append('}');
                    }
                    pb.append(']');
                    return "{\"name\":" + q(d.name()) + ",\"internal\":" + d.isInternal()
                            + ",\"topic_id\":" + q(String.valueOf(d.topicId()))
                            + ",\"partitions\":" + pb + "}";
                });
                b.append(",\"describe\":").append(described);
            }
            b.append(",\"isolation\":").append(q(iso.toString()));
            b.append(",\"earliest\":").append(listOffsetsJson(admin, tp, OffsetSpec.earliest(), iso));
            b.append(",\"latest\":").append(listOffsetsJson(admin, tp, OffsetSpec.latest(), iso));
            if (ts != null) {
                b.append(",\"for_timestamp\":")
                 .append(listOffsetsJson(admin, tp, OffsetSpec.forTimestamp(Long.parseLong(ts)), iso));
            }
        }
        out(b.append('}').toString());
        return 0;
    }

    static int create(Args a) throws Exception {
        String topic = a.pos(1, "topic");
        int partitions = Integer.parseInt(a.pos(2, "partitions"));
        Map<String, String> configs = new LinkedHashMap<>();
        for (String kv : a.all("--config")) {
            int eq = kv.indexOf('=');
            configs.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        try (AdminClient admin = adminClient(a)) {
            String res = attempt(() -> {
                NewTopic nt = new NewTopic(topic, Optional.of(partitions), Optional.of((short) 1)).configs(configs);
                admin.createTopics(List.of(nt)).all().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
                return "{\"ok\":true}";
            });
            out(res);
        }
        return 0;
    }

    static int delete(Args a) throws Exception {
        String topic = a.pos(1, "topic");
        try (AdminClient admin = adminClient(a)) {
            out(attempt(() -> {
                admin.deleteTopics(List.of(topic)).all().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
                return "{\"ok\":true}";
            }));
        }
        return 0;
    }

    static int list(Args a) throws Exception {
        try (AdminClient admin = adminClient(a)) {
            out(attempt(() -> {
                Set<String> names = admin.listTopics().names().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
                List<String> quoted = new ArrayList<>();
                for (String s : new java.util.TreeSet<>(names)) {
                    quoted.add(q(s));
                }
                return "{\"topics\":[" + String.join(",", quoted) + "]}";
            }));
        }
        return 0;
    }

    static int describeConfigs(Args a) throws Exception {
        String topic = a.pos(1, "topic");
        try (AdminClient admin = adminClient(a)) {
            out(attempt(() -> {
                ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
                Map<ConfigResource, Config> m = admin.describeConfigs(List.of(res)).all()
                        .get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
                Collection<ConfigEntry> entries = m.get(res).entries();
                List<String> parts = new ArrayList<>();
                for (ConfigEntry e : entries) {
                    parts.add(q(e.name()) + ":{\"value\":" + q(e.value()) + ",\"source\":" + q(e.source().name())
                            + ",\"default\":" + e.isDefault() + "}");
                }
                return "{\"configs\":{" + String.join(",", parts) + "}}";
            }));
        }
        return 0;
    }
}
