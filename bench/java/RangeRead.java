// What each task of Spark's Kafka source does in a batch read, with kafka-clients 3.9.0 (the
// client Spark 4.0's connector uses), for bench/spark_bench.py:
//
//   java -cp 'bench/java/build:compat-tests/java/lib/*' RangeRead <bootstrap> <topic> <end> <ranges>
//
// Splits offsets [0, end) of partition 0 into <ranges> equal ranges (Spark's minPartitions)
// and reads them in parallel, one thread and one KafkaConsumer per range, configured as
// Spark's executors configure theirs (KafkaSourceProvider.kafkaParamsForExecutors: byte
// array deserializers, auto.offset.reset=none, enable.auto.commit=false,
// receive.buffer.bytes=65536): assign, seek to the range's start, poll until its end.
// Prints one JSON line: {"rows":..,"bytes":..,"seconds":..,"rows_per_s":..}; exit 2 when a
// range did not reach its end within 120 s.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class RangeRead {
    public static void main(String[] args) throws Exception {
        if (args.length != 4) {
            System.err.println("usage: RangeRead <bootstrap> <topic> <end> <ranges>");
            System.exit(1);
        }
        String bootstrap = args[0];
        TopicPartition tp = new TopicPartition(args[1], 0);
        long end = Long.parseLong(args[2]);
        int ranges = Integer.parseInt(args[3]);
        AtomicLong rows = new AtomicLong();
        AtomicLong bytes = new AtomicLong();
        AtomicLong short_ = new AtomicLong();
        List<Thread> threads = new ArrayList<>();
        long started = System.nanoTime();
        for (int r = 0; r < ranges; r++) {
            long from = end * r / ranges;
            long until = end * (r + 1) / ranges;
            Thread t = new Thread(() -> {
                Properties p = new Properties();
                p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
                p.put(ConsumerConfig.GROUP_ID_CONFIG, "spark-kafka-relation-" + UUID.randomUUID() + "-executor");
                p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
                p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
                p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
                p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
                p.put(ConsumerConfig.RECEIVE_BUFFER_CONFIG, "65536");
                try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
                    c.assign(Collections.singletonList(tp));
                    c.seek(tp, from);
                    long next = from;
                    long deadline = System.nanoTime() + 120_000_000_000L;
                    while (next < until && System.nanoTime() < deadline) {
                        ConsumerRecords<byte[], byte[]> got = c.poll(Duration.ofMillis(512));
                        for (ConsumerRecord<byte[], byte[]> rec : got) {
                            if (rec.offset() >= until) {
                                next = until;
                                break;
                            }
                            rows.incrementAndGet();
                            bytes.addAndGet(rec.value() == null ? 0 : rec.value().length);
                            next = rec.offset() + 1;
                        }
                    }
                    if (next < until) {
                        short_.incrementAndGet();
                    }
                }
            });
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) {
            t.join();
        }
        double seconds = (System.nanoTime() - started) / 1e9;
        System.out.printf("{\"rows\":%d,\"bytes\":%d,\"seconds\":%.3f,\"rows_per_s\":%.0f}%n",
                rows.get(), bytes.get(), seconds, rows.get() / seconds);
        System.exit(short_.get() == 0 ? 0 : 2);
    }
}
