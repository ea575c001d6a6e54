package baton.peer;

import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.TaskMetadata;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.StandbyUpdateListener;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.processor.TaskId;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * Baton's RunningSum on Kafka Streams: per key, the running sum of the integer values,
 * one output per input with the key's sum as a string, state in a persistent RocksDB
 * store, exactly_once_v2.
 *
 * <p>What the benchmark needs to see is printed on stdout, one line at a time:
 * {@code peer <epoch ms> state=<S> active=<tasks> standby=<tasks> rebuilt=<n> standby_lag=<n>},
 * whenever one of these changed (and at most every {@value #REPORT_MS} ms). Under
 * {@code num.standby.replicas=0}, a standby task is a warmup (KIP-441). {@code rebuilt}
 * counts the changelog records this instance restored or applied as a standby/warmup.
 */
public final class RunningSumPeer {
    static final String STORE = "sums";
    static final long REPORT_MS = 50;

    private RunningSumPeer() {
    }

    /** The sum per key; the output's timestamp is the processing time, so output gaps
     *  measured from the topic are gaps in processing, as for Baton's outputs. */
    static final class RunningSum implements Processor<String, String, String, String> {
        private ProcessorContext<String, String> context;
        private KeyValueStore<String, Long> sums;

        @Override
        public void init(ProcessorContext<String, String> context) {
            this.context = context;
            this.sums = context.getStateStore(STORE);
        }

        @Override
        public void process(Record<String, String> record) {
            Long previous = sums.get(record.key());
            long total = (previous == null ? 0L : previous) + Long.parseLong(record.value());
            sums.put(record.key(), total);
            context.forward(new Record<>(record.key(), Long.toString(total),
                    System.currentTimeMillis(), record.headers()));
        }
    }

    static Map<String, String> parse(String[] args) {
        Map<String, String> given = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            if (!args[i].startsWith("--")) {
                throw new IllegalArgumentException("expected --name value, got " + args[i]);
            }
            given.put(args[i].substring(2), args[i + 1]);
        }
        for (String needed : new String[] {"bootstrap", "input", "output", "application-id",
                "state-dir"}) {
            if (!given.containsKey(needed)) {
                throw new IllegalArgumentException("missing --" + needed);
            }
        }
        return given;
    }

    static Properties properties(Map<String, String> given) {
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, given.get("application-id"));
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, given.get("bootstrap"));
        props.put(StreamsConfig.STATE_DIR_CONFIG, given.get("state-dir"));
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        // only what the command line gives: every other setting stays Kafka Streams' default
        Map<String, String> optional = Map.of(
                "standbys", StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG,
                "acceptable-recovery-lag", StreamsConfig.ACCEPTABLE_RECOVERY_LAG_CONFIG,
                "max-warmups", StreamsConfig.MAX_WARMUP_REPLICAS_CONFIG,
                "probing-interval-ms", StreamsConfig.PROBING_REBALANCE_INTERVAL_MS_CONFIG,
                "threads", StreamsConfig.NUM_STREAM_THREADS_CONFIG);
        optional.forEach((flag, key) -> {
            if (given.containsKey(flag)) {
                props.put(key, given.get(flag));
            }
        });
        return props;
    }

    static StreamsBuilder topology(String input, String output) {
        StreamsBuilder builder = new StreamsBuilder();
        builder.addStateStore(Stores.keyValueStoreBuilder(
                Stores.persistentKeyValueStore(STORE), Serdes.String(), Serdes.Long()));
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .process(RunningSum::new, STORE)
                .to(output, Produced.with(Serdes.String(), Serdes.String()));
        return builder;
    }

    /** Counts what is rebuilt from the changelog: active restoration and standby/warmup
     *  updates, with the standbys' lag per changelog partition. */
    static final class Rebuilt implements StateRestoreListener, StandbyUpdateListener {
        final AtomicLong records = new AtomicLong();
        final Map<TopicPartition, Long> standbyLag = new ConcurrentHashMap<>();

        @Override
        public void onRestoreStart(TopicPartition partition, String store, long start, long end) {
        }

        @Override
        public void onBatchRestored(TopicPartition partition, String store, long end, long n) {
            records.addAndGet(n);
        }

        @Override
        public void onRestoreEnd(TopicPartition partition, String store, long total) {
        }

        @Override
        public void onUpdateStart(TopicPartition partition, String store, long startOffset) {
        }

        @Override
        public void onBatchLoaded(TopicPartition partition, String store, TaskId task,
                                  long batchEndOffset, long batchSize, long currentEndOffset) {
            records.addAndGet(batchSize);
            standbyLag.put(partition, Math.max(0L, currentEndOffset - batchEndOffset - 1));
        }

        @Override
        public void onUpdateSuspended(TopicPartition partition, String store, long storeOffset,
                                      long currentEndOffset, SuspendReason reason) {
            standbyLag.remove(partition);
        }

        long lag() {
            return standbyLag.values().stream().mapToLong(Long::longValue).sum();
        }
    }

    static String tasks(Set<ThreadMetadata> threads, boolean active) {
        Set<String> ids = new TreeSet<>();
        for (ThreadMetadata thread : threads) {
            for (TaskMetadata task : active ? thread.activeTasks() : thread.standbyTasks()) {
                ids.add(task.taskId().toString());
            }
        }
        return String.join(",", ids);
    }

    public static void main(String[] args) throws InterruptedException {
        Map<String, String> given = parse(args);
        KafkaStreams streams = new KafkaStreams(
                topology(given.get("input"), given.get("output")).build(), properties(given));
        Rebuilt rebuilt = new Rebuilt();
        AtomicReference<KafkaStreams.State> state = new AtomicReference<>(streams.state());
        CountDownLatch stopped = new CountDownLatch(1);
        streams.setGlobalStateRestoreListener(rebuilt);
        streams.setStandbyUpdateListener(rebuilt);
        streams.setStateListener((now, before) -> {
            state.set(now);
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                stopped.countDown();
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close();
            stopped.countDown();
        }));
        streams.start();
        String last = "";
        long lastAt = 0;
        while (!stopped.await(REPORT_MS, java.util.concurrent.TimeUnit.MILLISECONDS)) {
            Set<ThreadMetadata> threads = streams.metadataForLocalThreads();
            String line = "state=" + state.get() + " active=" + tasks(threads, true)
                    + " standby=" + tasks(threads, false) + " rebuilt=" + rebuilt.records.get()
                    + " standby_lag=" + rebuilt.lag();
            long now = System.currentTimeMillis();
            // the counters change with every batch: a line per second for them alone
            String shape = line.replaceAll(" rebuilt=.*", "");
            if (!line.equals(last) && (!shape.equals(last.replaceAll(" rebuilt=.*", ""))
                    || now - lastAt >= 1000)) {
                System.out.println("peer " + now + " " + line);
                System.out.flush();
                last = line;
                lastAt = now;
            }
        }
        System.out.println("peer " + System.currentTimeMillis() + " state=" + state.get());
        System.exit(state.get() == KafkaStreams.State.ERROR ? 1 : 0);
    }
}
