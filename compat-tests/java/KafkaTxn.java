// Kafka transactions driver for tmsgate's compat-tests (kafka-clients 3.9.0), the companion of
// KafkaCompat.java. Built by compat-tests/java/build.sh; run with
//   java -cp 'compat-tests/java/build:compat-tests/java/lib/*' KafkaTxn <bootstrap> [--prop k=v]... STEP...
//
// One JVM runs a whole scenario: each STEP is a subcommand "name:key=value:key=value..." run in
// order, and each prints exactly one JSON result line on stdout,
//   {"step":"<name>","ok":true|false,"ms":<elapsed>, ...}
// with, on failure, "error" (exception class), "message" and "causes" (the classes of the whole
// cause chain). A failed step does not stop the scenario (the test asserts on every line).
// Progress lines carry "event" instead of "step". Diagnostics go to stderr.
// Exit code 0 when every step ran (whatever its outcome), 1 on a usage error.
//
// Record i of a send/plain step: key "k-<i>", value "v-<i>-<tag>", headers idx=<i>, hk=hv-<i>.
//
// Steps (topic names cannot contain ':'):
//   create:topic=T                         AdminClient createTopics (1 partition, RF 1)
//   producer:p=P:txid=X[:codec=C][:txn_timeout_ms=MS]
//                                          new transactional KafkaProducer named P,
//                                          then initTransactions()
//   begin:p=P | commit:p=P | abort:p=P | flush:p=P | close:p=P
//                                          beginTransaction / commitTransaction /
//                                          abortTransaction / flush / close(5 s); flush and commit
//                                          also wait for the futures of the sends since the last
//                                          flush/commit/abort and report "acked"/"failed"/"send_error"
//   send:p=P:topic=T:start=S:n=N[:tag=G]   N sends (futures kept; a synchronous throw is the
//                                          step's error)
//   plain:topic=T:start=S:n=N[:tag=G]      a fresh non-transactional (idempotent) producer
//   read:topic=T[:iso=rc|ru][:want=W][:max_ms=MS][:settle_ms=MS]
//                                          KafkaConsumer (no group) assign + seekToBeginning;
//                                          polls until it holds >= W records and its position
//                                          has reached endOffsets (re-read then), or max_ms;
//                                          then polls settle_ms more. Prints "records"
//                                          [{offset,key,value,headers}], "end0" (endOffsets at
//                                          start), "end", "position", "complete".
//   group-offset:group=G:topic=T           AdminClient listConsumerGroupOffsets: "offset" of T-0
//                                          (null when the group has none)
//   describe-txn:txid=X[:wait_ms=MS]       AdminClient describeTransactions; with wait_ms,
//                                          repeats until the state is no longer Ongoing/
//                                          Prepare* (or wait_ms): "state", "waited_ms", ...
//   hang                                   prints {"event":"hang"} and sleeps forever (the test
//                                          SIGKILLs the JVM)
//   ctp:in=I:out=O:group=G:txid=X[:every=50][:hang_after=K[:hang_at=send|offsets]][:until=E][:max_ms=MS]
//       consume-transform-produce worker: transactional producer X (initTransactions first),
//       KafkaConsumer subscribed to I in group G (read_committed, no auto commit); every input
//       record becomes one output record (same key, value "out:"+value, the input's headers plus
//       src-offset); every `every` records (and when a poll comes back empty) it calls
//       sendOffsetsToTransaction(next offset, consumer.groupMetadata()) and commitTransaction.
//       hang_after=K: after the K-th record (of this run) flush, print {"event":"hang"} and
//       sleep forever with the transaction open; with hang_at=offsets, instead at the first
//       commit point at or after the K-th record: sendOffsetsToTransaction, flush, hang (so the
//       open transaction holds a pending group offset). Stops when no transaction is open and the
//       consumer's position on I-0 is >= until. Events: ctp-init, ctp-assigned, ctp-commit.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.AdminClient;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TransactionDescription;
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
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class KafkaTxn {

    private static final long ADMIN_TIMEOUT_S = 30;

    static String bootstrap;
    static final List<String> props = new ArrayList<>();
    static final Map<String, KafkaProducer<byte[], byte[]>> producers = new LinkedHashMap<>();
    static final Map<String, List<Future<RecordMetadata>>> inflight = new HashMap<>();

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

    static Throwable unwrap(Throwable t) {
        while (t instanceof ExecutionException && t.getCause() != null) {
            t = t.getCause();
        }
        return t;
    }

    /** ,"error":..,"message":..,"causes":[..] for a failure (the JSON fragment, leading comma). */
    static String errorFields(Throwable t) {
        t = unwrap(t);
        List<String> chain = new ArrayList<>();
        for (Throwable c = t; c != null && chain.size() < 8; c = c.getCause()) {
            chain.add(q(c.getClass().getName()));
            if (c.getCause() == c) {
                break;
            }
        }
        return ",\"error\":" + q(t.getClass().getName()) + ",\"message\":" + q(String.valueOf(t.getMessage()))
                + ",\"causes\":[" + String.join(",", chain) + "]";
    }

    static void out(String line) {
        System.out.println(line);
        System.out.flush();
    }

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

    // ------------------------------------------------------------------ args

    static final class Step {
        final String name;
        final Map<String, String> kv = new LinkedHashMap<>();

        Step(String spec) {
            String[] parts = spec.split(":");
            name = parts[0];
            for (int i = 1; i < parts.length; i++) {
                int eq = parts[i].indexOf('=');
                if (eq <= 0) {
                    throw new IllegalArgumentException("step " + spec + ": expected key=value, got " + parts[i]);
                }
                kv.put(parts[i].substring(0, eq), parts[i].substring(eq + 1));
            }
        }

        String get(String k) {
            String v = kv.get(k);
            if (v == null) {
                throw new IllegalArgumentException("step " + name + " needs " + k + "=");
            }
            return v;
        }

        String get(String k, String dflt) {
            return kv.getOrDefault(k, dflt);
        }

        int i(String k, int dflt) {
            return Integer.parseInt(get(k, Integer.toString(dflt)));
        }

        long l(String k, long dflt) {
            return Long.parseLong(get(k, Long.toString(dflt)));
        }
    }

    static void applyProps(Properties p) {
        for (String kv : props) {
            int eq = kv.indexOf('=');
            if (eq <= 0) {
                throw new IllegalArgumentException("--prop needs key=value, got " + kv);
            }
            p.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
    }

    // ------------------------------------------------------------------ main

    public static void main(String[] argv) {
        int rc = 0;
        try {
            if (argv.length < 1) {
                throw new IllegalArgumentException("usage: KafkaTxn <bootstrap> [--prop k=v]... STEP...");
            }
            bootstrap = argv[0];
            List<Step> steps = new ArrayList<>();
            for (int i = 1; i < argv.length; i++) {
                if (argv[i].equals("--prop")) {
                    if (i + 1 >= argv.length) {
                        throw new IllegalArgumentException("--prop needs a value");
                    }
                    props.add(argv[++i]);
                } else {
                    steps.add(new Step(argv[i]));
                }
            }
            for (Step s : steps) {
                long t0 = System.nanoTime();
                String fields;
                boolean ok;
                try {
                    fields = run(s);
                    ok = !fields.contains("\"error\":");
                } catch (IllegalArgumentException e) {
                    throw e;
                } catch (Throwable t) {
                    t.printStackTrace(System.err);
                    fields = errorFields(t);
                    ok = false;
                }
                long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                out("{\"step\":" + q(s.name) + ",\"ok\":" + ok + ",\"ms\":" + ms + fields + "}");
            }
            for (KafkaProducer<byte[], byte[]> p : producers.values()) {
                try {
                    p.close(Duration.ofSeconds(3));
                } catch (Throwable t) {
                    // a fenced producer may complain; irrelevant here
                }
            }
        } catch (IllegalArgumentException e) {
            System.err.println("usage error: " + e.getMessage());
            rc = 1;
        }
        System.out.flush();
        System.err.flush();
        // kafka-clients leaves non-daemon threads behind on some error paths; do not hang.
        Runtime.getRuntime().halt(rc);
    }

    /** Runs one step; returns the JSON fields (leading comma) of its result line. */
    static String run(Step s) throws Exception {
        switch (s.name) {
            case "create": return create(s);
            case "producer": return producer(s);
            case "begin":
                prod(s).beginTransaction();
                return "";
            case "send": return send(s);
            case "flush":
                prod(s).flush();
                return drain(s.get("p"));
            case "commit": return commit(s);
            case "abort":
                inflight.remove(s.get("p"));
                prod(s).abortTransaction();
                return "";
            case "close":
                producers.remove(s.get("p")).close(Duration.ofSeconds(5));
                return "";
            case "plain": return plain(s);
            case "read": return read(s);
            case "group-offset": return groupOffset(s);
            case "describe-txn": return describeTxn(s);
            case "hang":
                hang();
                return "";
            case "ctp": return ctp(s);
            default:
                throw new IllegalArgumentException("unknown step " + s.name);
        }
    }

    static void hang() throws InterruptedException {
        out("{\"event\":\"hang\"}");
        new CountDownLatch(1).await(); // until the test kills the JVM
    }

    // ------------------------------------------------------------------ producers

    static Properties producerProps(String clientId) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.CLIENT_ID_CONFIG, clientId);
        // Bounded waits so a misbehaving broker fails the test instead of hanging it.
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        return p;
    }

    static Properties txnProducerProps(String name, String txid, String codec, String txnTimeoutMs) {
        Properties p = producerProps("kafka-txn-java-" + name);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txid);
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        if (txnTimeoutMs != null) {
            p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, txnTimeoutMs);
        }
        applyProps(p);
        return p;
    }

    static KafkaProducer<byte[], byte[]> prod(Step s) {
        KafkaProducer<byte[], byte[]> p = producers.get(s.get("p"));
        if (p == null) {
            throw new IllegalArgumentException("no producer " + s.get("p"));
        }
        return p;
    }

    static String producer(Step s) {
        String name = s.get("p");
        Properties p = txnProducerProps(name, s.get("txid"), s.get("codec", "none"), s.get("txn_timeout_ms", null));
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
        producers.put(name, producer);
        producer.initTransactions();
        return "";
    }

    static ProducerRecord<byte[], byte[]> record(String topic, int i, String tag) {
        RecordHeaders headers = new RecordHeaders();
        headers.add(new RecordHeader("idx", utf8(Integer.toString(i))));
        headers.add(new RecordHeader("hk", utf8("hv-" + i)));
        return new ProducerRecord<>(topic, null, null, utf8("k-" + i), utf8("v-" + i + "-" + tag), headers);
    }

    static String send(Step s) {
        KafkaProducer<byte[], byte[]> p = prod(s);
        String topic = s.get("topic");
        int start = s.i("start", 0);
        int n = s.i("n", 1);
        String tag = s.get("tag", "t");
        List<Future<RecordMetadata>> futures = inflight.computeIfAbsent(s.get("p"), k -> new ArrayList<>());
        for (int i = start; i < start + n; i++) {
            futures.add(p.send(record(topic, i, tag)));
        }
        return ",\"sent\":" + n;
    }

    /** Waits for the futures of the sends since the last drain: ,"acked":..,"failed":..[,"send_error":..]. */
    static String drain(String name) {
        List<Future<RecordMetadata>> futures = inflight.remove(name);
        if (futures == null) {
            return ",\"acked\":0,\"failed\":0,\"offsets\":[]";
        }
        int acked = 0;
        int failed = 0;
        Throwable first = null;
        List<String> offsets = new ArrayList<>();
        for (Future<RecordMetadata> f : futures) {
            try {
                RecordMetadata md = f.get(40, TimeUnit.SECONDS);
                acked++;
                offsets.add(Long.toString(md.offset()));
            } catch (Throwable t) {
                failed++;
                if (first == null) {
                    first = t;
                }
            }
        }
        String b = ",\"acked\":" + acked + ",\"failed\":" + failed + ",\"offsets\":[" + String.join(",", offsets) + "]";
        if (first != null) {
            String e = errorFields(first);
            // as "send_error"/"send_causes" so that it does not make the step itself fail
            b += e.replace(",\"error\":", ",\"send_error\":").replace(",\"message\":", ",\"send_message\":")
                  .replace(",\"causes\":", ",\"send_causes\":");
        }
        return b;
    }

    static String commit(Step s) {
        KafkaProducer<byte[], byte[]> p = prod(s);
        String name = s.get("p");
        Throwable err = null;
        try {
            p.commitTransaction();
        } catch (Throwable t) {
            err = t;
        }
        String sends = inflight.containsKey(name) ? drain(name) : "";
        return sends + (err == null ? "" : errorFields(err));
    }

    static String plain(Step s) throws Exception {
        Properties p = producerProps("kafka-txn-java-plain");
        applyProps(p);
        String topic = s.get("topic");
        int start = s.i("start", 0);
        int n = s.i("n", 1);
        String tag = s.get("tag", "plain");
        List<String> offsets = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = start; i < start + n; i++) {
                futures.add(producer.send(record(topic, i, tag)));
            }
            producer.flush();
            for (Future<RecordMetadata> f : futures) {
                offsets.add(Long.toString(f.get(40, TimeUnit.SECONDS).offset()));
            }
            producer.close(Duration.ofSeconds(10));
        }
        return ",\"offsets\":[" + String.join(",", offsets) + "]";
    }

    // ------------------------------------------------------------------ consumers

    static Properties consumerProps(String clientId, boolean readCommitted) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, readCommitted ? "read_committed" : "read_uncommitted");
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        return p;
    }

    static String recordJson(ConsumerRecord<byte[], byte[]> r) {
        return "{\"offset\":" + r.offset() + ",\"key\":" + q(r.key()) + ",\"value\":" + q(r.value())
                + ",\"headers\":" + headersJson(r.headers()) + "}";
    }

    static String read(Step s) {
        String topic = s.get("topic");
        String iso = s.get("iso", "rc");
        if (!iso.equals("rc") && !iso.equals("ru")) {
            throw new IllegalArgumentException("iso must be rc or ru");
        }
        int want = s.i("want", 0);
        long maxMs = s.l("max_ms", 20000);
        long settleMs = s.l("settle_ms", 300);
        Properties p = consumerProps("kafka-txn-java-reader", iso.equals("rc"));
        applyProps(p);
        TopicPartition tp = new TopicPartition(topic, 0);
        List<String> recs = new ArrayList<>();
        long end0;
        long end;
        long position;
        boolean complete = false;
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            c.assign(List.of(tp));
            end0 = c.endOffsets(List.of(tp)).get(tp);
            end = end0;
            c.seekToBeginning(List.of(tp));
            long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(maxMs);
            while (System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(100))) {
                    recs.add(recordJson(r));
                }
                if (recs.size() >= want && c.position(tp) >= end) {
                    end = c.endOffsets(List.of(tp)).get(tp);
                    if (c.position(tp) >= end) {
                        complete = true;
                        break;
                    }
                }
            }
            long settle = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(settleMs);
            while (System.nanoTime() < settle) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(50))) {
                    recs.add(recordJson(r));
                }
            }
            position = c.position(tp);
            c.close(Duration.ofSeconds(5));
        }
        return ",\"topic\":" + q(topic) + ",\"iso\":" + q(iso) + ",\"complete\":" + complete + ",\"end0\":" + end0
                + ",\"end\":" + end + ",\"position\":" + position + ",\"count\":" + recs.size()
                + ",\"records\":[" + String.join(",", recs) + "]";
    }

    // ------------------------------------------------------------------ admin

    static AdminClient admin() {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "kafka-txn-java-admin");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        return AdminClient.create(p);
    }

    static String create(Step s) throws Exception {
        try (AdminClient a = admin()) {
            a.createTopics(List.of(new NewTopic(s.get("topic"), 1, (short) 1))).all()
             .get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
        }
        return "";
    }

    static String groupOffset(Step s) throws Exception {
        TopicPartition tp = new TopicPartition(s.get("topic"), 0);
        try (AdminClient a = admin()) {
            Map<TopicPartition, OffsetAndMetadata> m = a.listConsumerGroupOffsets(s.get("group"))
                    .partitionsToOffsetAndMetadata().get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
            OffsetAndMetadata om = m.get(tp);
            return ",\"offset\":" + (om == null ? "null" : Long.toString(om.offset()));
        }
    }

    static String describeTxn(Step s) throws Exception {
        String txid = s.get("txid");
        long waitMs = s.l("wait_ms", 0);
        long t0 = System.nanoTime();
        long deadline = t0 + TimeUnit.MILLISECONDS.toNanos(waitMs);
        List<String> seen = new ArrayList<>();
        try (AdminClient a = admin()) {
            while (true) {
                TransactionDescription d = a.describeTransactions(List.of(txid)).description(txid)
                        .get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
                String state = d.state().name();
                if (seen.isEmpty() || !seen.get(seen.size() - 1).equals(q(state))) {
                    seen.add(q(state));
                }
                boolean open = state.equals("ONGOING") || state.startsWith("PREPARE_");
                if (!open || System.nanoTime() >= deadline) {
                    List<String> parts = new ArrayList<>();
                    for (TopicPartition tp : d.topicPartitions()) {
                        parts.add(q(tp.toString()));
                    }
                    return ",\"state\":" + q(state) + ",\"states_seen\":[" + String.join(",", seen) + "]"
                            + ",\"waited_ms\":" + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0)
                            + ",\"producer_id\":" + d.producerId() + ",\"producer_epoch\":" + d.producerEpoch()
                            + ",\"timeout_ms\":" + d.transactionTimeoutMs()
                            + ",\"partitions\":[" + String.join(",", parts) + "]";
                }
                Thread.sleep(200);
            }
        }
    }

    // ------------------------------------------------------------------ consume-transform-produce

    static String ctp(Step s) throws Exception {
        String in = s.get("in");
        String outTopic = s.get("out");
        String group = s.get("group");
        String txid = s.get("txid");
        int every = s.i("every", 50);
        int hangAfter = s.i("hang_after", 0);
        String hangAt = s.get("hang_at", "send");
        if (!hangAt.equals("send") && !hangAt.equals("offsets")) {
            throw new IllegalArgumentException("hang_at must be send or offsets");
        }
        long until = s.l("until", Long.MAX_VALUE);
        long maxMs = s.l("max_ms", 60000);

        long t0 = System.nanoTime();
        KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(txnProducerProps("ctp", txid, s.get("codec", "none"), null));
        producers.put("ctp", producer);
        producer.initTransactions();
        out("{\"event\":\"ctp-init\",\"ms\":" + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0) + "}");

        Properties cp = consumerProps("kafka-txn-java-ctp", true);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
        cp.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "120");
        applyProps(cp);
        TopicPartition inTp = new TopicPartition(in, 0);
        long processed = 0;
        int pending = 0;
        int commits = 0;
        long firstOffset = -1;
        long lastOffset = -1;
        long position = -1;
        boolean inTxn = false;
        boolean done = false;
        long deadline = t0 + TimeUnit.MILLISECONDS.toNanos(maxMs);
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(cp)) {
            c.subscribe(List.of(in), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    out("{\"event\":\"ctp-assigned\",\"partitions\":" + parts.size() + ",\"ms\":"
                            + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0) + "}");
                }
            });
            while (System.nanoTime() < deadline) {
                ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    if (!inTxn) {
                        producer.beginTransaction();
                        inTxn = true;
                    }
                    RecordHeaders headers = new RecordHeaders();
                    for (Header h : r.headers()) {
                        headers.add(h);
                    }
                    headers.add(new RecordHeader("src-offset", utf8(Long.toString(r.offset()))));
                    byte[] value = r.value() == null ? null
                            : utf8("out:" + new String(r.value(), StandardCharsets.UTF_8));
                    producer.send(new ProducerRecord<>(outTopic, null, null, r.key(), value, headers));
                    if (firstOffset < 0) {
                        firstOffset = r.offset();
                    }
                    lastOffset = r.offset();
                    processed++;
                    pending++;
                    if (hangAfter > 0 && processed == hangAfter && hangAt.equals("send")) {
                        producer.flush();
                        out("{\"event\":\"hang\",\"processed\":" + processed + ",\"pending\":" + pending
                                + ",\"last_offset\":" + lastOffset + "}");
                        hang();
                    }
                    if (pending >= every) {
                        if (hangAfter > 0 && processed >= hangAfter && hangAt.equals("offsets")) {
                            producer.sendOffsetsToTransaction(
                                    Map.of(new TopicPartition(r.topic(), r.partition()),
                                           new OffsetAndMetadata(lastOffset + 1)),
                                    c.groupMetadata());
                            producer.flush();
                            out("{\"event\":\"hang\",\"processed\":" + processed + ",\"pending\":" + pending
                                    + ",\"last_offset\":" + lastOffset + ",\"offsets_sent\":" + (lastOffset + 1) + "}");
                            hang();
                        }
                        commitCtp(producer, c, r.topic(), r.partition(), lastOffset, pending);
                        commits++;
                        pending = 0;
                        inTxn = false;
                    }
                }
                if (recs.isEmpty() && inTxn) {
                    commitCtp(producer, c, in, 0, lastOffset, pending);
                    commits++;
                    pending = 0;
                    inTxn = false;
                }
                if (!inTxn && c.assignment().contains(inTp)) {
                    position = c.position(inTp);
                    if (position >= until) {
                        done = true;
                        break;
                    }
                }
            }
            c.close(Duration.ofSeconds(5));
        }
        producers.remove("ctp");
        producer.close(Duration.ofSeconds(5));
        String res = ",\"processed\":" + processed + ",\"commits\":" + commits + ",\"first_offset\":" + firstOffset
                + ",\"last_offset\":" + lastOffset + ",\"position\":" + position + ",\"done\":" + done;
        if (!done) {
            res += ",\"error\":\"incomplete\",\"message\":" + q("position " + position + " < until " + until
                    + " after " + maxMs + " ms");
        }
        return res;
    }

    static void commitCtp(KafkaProducer<byte[], byte[]> producer, KafkaConsumer<byte[], byte[]> c, String topic,
                          int partition, long lastOffset, int count) {
        Map<TopicPartition, OffsetAndMetadata> offsets =
                Map.of(new TopicPartition(topic, partition), new OffsetAndMetadata(lastOffset + 1));
        producer.sendOffsetsToTransaction(offsets, c.groupMetadata());
        producer.commitTransaction();
        out("{\"event\":\"ctp-commit\",\"offset\":" + (lastOffset + 1) + ",\"count\":" + count + "}");
    }
}
