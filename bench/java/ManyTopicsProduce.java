// One Java KafkaProducer (kafka-clients 3.9.0) spreading 1 KiB records round-robin over T
// existing one-partition topics, for bench/kafka_topics_bench.py --client java:
//
//   java -cp 'bench/java/build:compat-tests/java/lib/*' ManyTopicsProduce <bootstrap> <prefix> <T> <N>
//
// Topics are <prefix>00000 .. (5 digits, as the benchmark names them). Settings as the
// benchmark's confluent-kafka producer: acks=all, linger.ms=5, no compression, idempotence
// off. Unlike librdkafka, the Java client packs the batches of every partition led by one
// broker into one ProduceRequest, which is what this program is here to show. batch.size is
// 1 MB divided among the topics (at least 16 KiB): the client reserves a whole batch.size
// buffer per partition with data waiting, from buffer.memory (64 MiB here).
// Warms up with one record per topic (metadata for every topic), prints "timing" on stdout,
// then sends N records, flushes, and prints one JSON line:
// {"records":..,"seconds":..,"cpu_seconds":..}; exits 2 on any failed send.

import java.lang.management.ManagementFactory;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class ManyTopicsProduce {
    public static void main(String[] args) throws Exception {
        if (args.length != 4) {
            System.err.println("usage: ManyTopicsProduce <bootstrap> <prefix> <T> <N>");
            System.exit(1);
        }
        String prefix = args[1];
        int topics = Integer.parseInt(args[2]);
        long n = Long.parseLong(args[3]);
        String[] names = new String[topics];
        for (int i = 0; i < topics; i++) {
            names[i] = prefix + String.format("%05d", i);
        }
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "none");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
        props.put(ProducerConfig.BATCH_SIZE_CONFIG, Integer.toString(Math.max(16384, 1_000_000 / topics)));
        props.put(ProducerConfig.BUFFER_MEMORY_CONFIG, Long.toString(64L << 20));
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "120000");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        byte[] value = new byte[1024];
        new Random(1).nextBytes(value);
        AtomicLong failed = new AtomicLong();
        AtomicReference<Exception> first = new AtomicReference<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            send(producer, names, topics, value, failed, first);
            check(failed, first, "warm-up");
            System.out.println("timing");
            System.out.flush();
            long cpu0 = cpuNanos();
            long t0 = System.nanoTime();
            send(producer, names, n, value, failed, first);
            double seconds = (System.nanoTime() - t0) / 1e9;
            double cpu = (cpuNanos() - cpu0) / 1e9;
            check(failed, first, "produce");
            System.out.printf("{\"records\":%d,\"seconds\":%.3f,\"cpu_seconds\":%.3f}%n", n, seconds, cpu);
        }
    }

    private static void send(KafkaProducer<byte[], byte[]> producer, String[] names, long n,
                             byte[] value, AtomicLong failed, AtomicReference<Exception> first) {
        for (long i = 0; i < n; i++) {
            producer.send(new ProducerRecord<>(names[(int) (i % names.length)], 0, null, value),
                (metadata, exc) -> {
                    if (exc != null) {
                        failed.incrementAndGet();
                        first.compareAndSet(null, exc);
                    }
                });
        }
        producer.flush();
    }

    private static void check(AtomicLong failed, AtomicReference<Exception> first, String what) {
        if (failed.get() > 0) {
            System.err.println(what + ": " + failed.get() + " sends failed, first: " + first.get());
            System.exit(2);
        }
    }

    private static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean)
            ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime();
    }
}
