// `bench ops`'s workload through Flink's own RocksDB keyed state backend (EmbeddedRocksDBStateBackend,
// from the flink-dist jar that PyPI's apache-flink-libraries wheel bundles), so rockstate's
// absolute figures can be set against Flink's on the same machine in the same minutes.
// scripts/flink-bench.sh fetches the jars, compiles this file and runs it; see
// docs/decisions/0019-benchmark-method-and-flink-comparison.md.
//
// The workload is the one `rockstate-bench ops --solo-only` runs: N keys (Long, as Flink
// serializes it: 8 bytes big-endian), a pool of 4096 random values of B bytes, one ValueState
// in the void namespace, phases insert 0..N in order, N updates of random existing keys, N gets
// of random existing keys, N gets of random missing keys (N..2N), N read-modify-writes (get,
// bump the first byte, update). Key groups: 128 (Flink's default max parallelism, and
// rockstate's), the backend owns them all.
//
// Before each phase, untimed, both sides flush the memtable and wait for compactions (rockstate's
// `wait_for_compactions`), so every phase starts from SST files; the state's files per level
// are printed with each phase.
//
// Memory: as a TaskManager with `state.backend.rocksdb.memory.managed: true` (Flink's default)
// configures it: one LRU cache with a write-buffer manager charged to it, from 512 MiB of
// managed memory (rockstate's default budget), write-buffer ratio 0.5, high-priority pool 0.1.
// Flink's own formula turns that into a 427 MiB cache and a 171 MiB write-buffer limit
// (rockstate: 512 MiB and 256 MiB).
// `--bloom` sets `state.backend.rocksdb.use-bloom-filter: true` (Flink's default is off);
// `--low-priority-compaction` lowers the compaction pool to nice 19 as rockstate does by
// default (Flink does not).
//
// It lives in Flink's package only because RocksDBSharedResources is package-private there.
package org.apache.flink.state.rocksdb;

import java.io.File;
import java.nio.file.Files;
import java.util.Collections;
import java.util.SplittableRandom;

import org.apache.flink.api.common.ExecutionConfig;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeutils.base.LongSerializer;
import org.apache.flink.api.common.typeutils.base.array.BytePrimitiveArraySerializer;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.fs.CloseableRegistry;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.runtime.memory.OpaqueMemoryResource;
import org.apache.flink.runtime.state.AbstractStateBackend;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.LocalRecoveryConfig;
import org.apache.flink.runtime.state.VoidNamespace;
import org.apache.flink.runtime.state.VoidNamespaceSerializer;
import org.apache.flink.runtime.state.metrics.LatencyTrackingStateConfig;
import org.apache.flink.runtime.state.metrics.SizeTrackingStateConfig;
import org.apache.flink.runtime.state.ttl.TtlTimeProvider;
import org.rocksdb.ColumnFamilyHandle;
import org.rocksdb.Env;
import org.rocksdb.FlushOptions;
import org.rocksdb.Priority;
import org.rocksdb.RocksDB;

public final class FlinkOps {
    private static final int KEY_GROUPS = 128;
    private static final int SLICES = 20;
    private static final String[] PHASES = {
        "insert", "update", "get", "get_missing", "read_modify_write"
    };

    public static void main(String[] args) throws Exception {
        long n = 1_000_000;
        int valueBytes = 100;
        long seed = 42;
        long budget = 512L << 20;
        boolean bloom = false;
        boolean lowPriority = false;
        long warmup = 200_000;
        String dir = null;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--keys": n = Long.parseLong(args[++i]); break;
                case "--value-bytes": valueBytes = Integer.parseInt(args[++i]); break;
                case "--seed": seed = Long.parseLong(args[++i]); break;
                case "--budget-bytes": budget = Long.parseLong(args[++i]); break;
                case "--bloom": bloom = true; break;
                case "--low-priority-compaction": lowPriority = true; break;
                case "--warmup-keys": warmup = Long.parseLong(args[++i]); break;
                case "--dir": dir = args[++i]; break;
                default: throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        File root = dir == null
                ? Files.createTempDirectory("flink-ops").toFile()
                : Files.createDirectories(new File(dir).toPath()).toFile();
        // Flink's own loader: extracts the frocksdbjni library bundled in flink-dist.
        EmbeddedRocksDBStateBackend.ensureRocksDBIsLoaded(root.getAbsolutePath());
        if (lowPriority) {
            // What rockstate's `low_priority_compaction` does: nice 19 for the compaction pool.
            Env.getDefault().lowerThreadPoolCPUPriority(Priority.LOW);
        }
        System.out.printf(
                "# flink ops: keys=%d value_bytes=%d bloom=%b low_priority_compaction=%b "
                        + "budget_bytes=%d warmup_keys=%d (Flink 2.3 EmbeddedRocksDBStateBackend, "
                        + "managed memory, PredefinedOptions.DEFAULT)%n",
                n, valueBytes, bloom, lowPriority, budget, warmup);
        // The JIT compiles the whole path first on a throw-away backend, so the figures are
        // those of a warm TaskManager.
        if (warmup > 0) {
            run(new File(root, "warmup"), warmup, valueBytes, seed + 1, budget, bloom, false);
        }
        run(new File(root, "bench"), n, valueBytes, seed, budget, bloom, true);
        deleteRecursively(root);
    }

    private static void run(
            File base, long n, int valueBytes, long seed, long budget, boolean bloom, boolean print)
            throws Exception {
        Files.createDirectories(base.toPath());
        byte[][] values = new byte[4096][valueBytes];
        SplittableRandom valueRng = new SplittableRandom(seed);
        for (byte[] v : values) {
            for (int j = 0; j < v.length; j++) {
                v[j] = (byte) valueRng.nextInt(256);
            }
        }

        Configuration config = new Configuration();
        config.setString("state.backend.rocksdb.use-bloom-filter", Boolean.toString(bloom));
        RocksDBSharedResources shared = RocksDBMemoryControllerUtils.allocateRocksDBSharedResources(
                budget, 0.5, 0.1, false, RocksDBMemoryControllerUtils.RocksDBMemoryFactory.DEFAULT);
        OpaqueMemoryResource<RocksDBSharedResources> memory =
                new OpaqueMemoryResource<>(shared, budget, shared::close);
        RocksDBResourceContainer resources = new RocksDBResourceContainer(
                config, PredefinedOptions.DEFAULT, null, memory, base, false);
        ExecutionConfig executionConfig = new ExecutionConfig();
        RocksDBKeyedStateBackend<Long> backend = new RocksDBKeyedStateBackendBuilder<>(
                        "bench",
                        FlinkOps.class.getClassLoader(),
                        base,
                        resources,
                        name -> resources.getColumnOptions(),
                        null,
                        LongSerializer.INSTANCE,
                        KEY_GROUPS,
                        new KeyGroupRange(0, KEY_GROUPS - 1),
                        executionConfig,
                        LocalRecoveryConfig.BACKUP_AND_RECOVERY_DISABLED,
                        RocksDBPriorityQueueConfig.buildWithPriorityQueueType(
                                EmbeddedRocksDBStateBackend.PriorityQueueStateType.ROCKSDB),
                        TtlTimeProvider.DEFAULT,
                        LatencyTrackingStateConfig.disabled(),
                        SizeTrackingStateConfig.disabled(),
                        new UnregisteredMetricsGroup(),
                        (name, value) -> {},
                        Collections.emptyList(),
                        AbstractStateBackend.getCompressionDecorator(executionConfig),
                        new CloseableRegistry())
                .build();
        ValueState<byte[]> state = backend.getPartitionedState(
                VoidNamespace.INSTANCE,
                VoidNamespaceSerializer.INSTANCE,
                new ValueStateDescriptor<>("bench", BytePrimitiveArraySerializer.INSTANCE));

        RocksDB db = backend.db;
        ColumnFamilyHandle cf = backend.getColumnFamilyHandle("bench");
        for (int p = 0; p < PHASES.length; p++) {
            // As `bench ops` does before each phase (`wait_for_compactions`, untimed): flush
            // the memtable and let compactions finish, so every phase starts from SST files.
            settle(db, cf);
            String levels = levels(db, cf);
            long start = System.nanoTime();
            long found = runPhase(backend, state, p, n, seed, values);
            double secs = (System.nanoTime() - start) / 1e9;
            long expected = p == 2 ? n : 0;
            if ((p == 2 || p == 3) && found != expected) {
                throw new IllegalStateException(
                        PHASES[p] + " found " + found + " keys, expected " + expected);
            }
            if (print) {
                System.out.printf(
                        "flink_phase=%s flink_ops_s=%.0f files_before=%s%n",
                        PHASES[p], n / secs, levels);
            }
        }
        backend.dispose();
        resources.close(); // also releases the shared cache and write-buffer manager
        deleteRecursively(base);
    }

    /** One phase, slice by slice as `bench ops` cuts it; returns how many reads found a value. */
    private static long runPhase(
            RocksDBKeyedStateBackend<Long> backend,
            ValueState<byte[]> state,
            int p,
            long n,
            long seed,
            byte[][] values)
            throws Exception {
        long found = 0;
        for (int slice = 0; slice < SLICES; slice++) {
            long lo = n * slice / SLICES;
            long hi = n * (slice + 1) / SLICES;
            SplittableRandom rng = new SplittableRandom(seed ^ ((long) p << 32) ^ slice);
            for (long i = lo; i < hi; i++) {
                byte[] value = values[(int) (i % values.length)];
                switch (p) {
                    case 0:
                        backend.setCurrentKey(i);
                        state.update(value);
                        break;
                    case 1:
                        backend.setCurrentKey(rng.nextLong(n));
                        state.update(value);
                        break;
                    case 2:
                        backend.setCurrentKey(rng.nextLong(n));
                        found += state.value() != null ? 1 : 0;
                        break;
                    case 3:
                        backend.setCurrentKey(n + rng.nextLong(n));
                        found += state.value() != null ? 1 : 0;
                        break;
                    default:
                        backend.setCurrentKey(rng.nextLong(n));
                        byte[] v = state.value();
                        if (v == null) {
                            v = new byte[0];
                        } else if (v.length > 0) {
                            v[0]++;
                        }
                        state.update(v);
                }
            }
        }
        return found;
    }

    /** Flushes the state's memtable and waits until no flush or compaction is left. */
    private static void settle(RocksDB db, ColumnFamilyHandle cf) throws Exception {
        try (FlushOptions flush = new FlushOptions().setWaitForFlush(true)) {
            db.flush(flush, cf);
        }
        while (db.getLongProperty(cf, "rocksdb.compaction-pending") > 0
                || db.getLongProperty("rocksdb.num-running-compactions") > 0
                || db.getLongProperty("rocksdb.num-running-flushes") > 0) {
            Thread.sleep(20);
        }
    }

    /** The state's SST files per level, as `L0:2,L6:2` (`bench ops` prints the same). */
    private static String levels(RocksDB db, ColumnFamilyHandle cf) throws Exception {
        StringBuilder out = new StringBuilder();
        for (int level = 0; level < 7; level++) {
            long files = Long.parseLong(
                    db.getProperty(cf, "rocksdb.num-files-at-level" + level).trim());
            if (files > 0) {
                out.append(out.length() > 0 ? "," : "").append("L").append(level).append(":")
                        .append(files);
            }
        }
        return out.length() > 0 ? out.toString() : "none";
    }

    private static void deleteRecursively(File f) {
        File[] children = f.listFiles();
        if (children != null) {
            for (File c : children) {
                deleteRecursively(c);
            }
        }
        f.delete();
    }
}
