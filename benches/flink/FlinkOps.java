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
// bump the first byte, update). `--ops M` cuts every phase after the insert to M operations,
// `--zipf S` draws the existing keys of update, get and read-modify-write from a Zipf
// distribution over the key ranks, scattered over the keys as `bench ops --zipf` scatters them
// (rank r is key r * P mod N), and `--ttl` gives the state a week's TTL (Flink's defaults:
// refreshed on create and write, expired values never returned, cleaned by the compaction
// filter), as `bench ops --ttl` and `bench matrix` do. Key groups: 128 (Flink's default max parallelism, and
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
import java.time.Duration;
import java.nio.file.Files;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.SplittableRandom;

import org.apache.flink.api.common.ExecutionConfig;
import org.apache.flink.api.common.state.StateTtlConfig;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.common.typeutils.base.LongSerializer;
import org.apache.flink.api.common.typeutils.base.array.BytePrimitiveArraySerializer;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.fs.CloseableRegistry;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.runtime.memory.OpaqueMemoryResource;
import org.apache.flink.runtime.state.AbstractStateBackend;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyedStateHandle;
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
        long ops = -1;
        double zipf = 0;
        boolean ttl = false;
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
                case "--ops": ops = Long.parseLong(args[++i]); break;
                case "--zipf": zipf = Double.parseDouble(args[++i]); break;
                case "--ttl": ttl = true; break;
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
        if (ops < 0 || ops > n) {
            ops = n;
        }
        System.out.printf(
                "# flink ops: keys=%d value_bytes=%d bloom=%b low_priority_compaction=%b "
                        + "budget_bytes=%d warmup_keys=%d ops=%d zipf=%s ttl=%b (Flink 2.3 "
                        + "EmbeddedRocksDBStateBackend, managed memory, PredefinedOptions.DEFAULT)%n",
                n, valueBytes, bloom, lowPriority, budget, warmup, ops,
                zipf > 0 ? Double.toString(zipf) : "uniform", ttl);
        Workload w = new Workload(n, ops, zipf, ttl);
        // The JIT compiles the whole path first on a throw-away backend, so the figures are
        // those of a warm TaskManager.
        if (warmup > 0) {
            Workload small = new Workload(warmup, Math.min(ops, warmup), zipf, ttl);
            run(new File(root, "warmup"), small, valueBytes, seed + 1, budget, bloom, false);
        }
        run(new File(root, "bench"), w, valueBytes, seed, budget, bloom, true);
        deleteRecursively(root);
    }

    /** Keys, operations per phase after the insert, how existing keys are drawn, TTL. */
    private static final class Workload {
        final long n;
        final long ops;
        final boolean ttl;
        /** Cumulative Zipf weights of ranks 0..n, or null for uniform keys. */
        final double[] zipfCdf;

        Workload(long n, long ops, double zipf, boolean ttl) {
            this.n = n;
            this.ops = ops;
            this.ttl = ttl;
            if (zipf > 0) {
                zipfCdf = new double[(int) n];
                double total = 0;
                for (int rank = 1; rank <= n; rank++) {
                    total += 1.0 / Math.pow(rank, zipf);
                    zipfCdf[rank - 1] = total;
                }
            } else {
                zipfCdf = null;
            }
        }

        /** An existing key: uniform, or a Zipf rank scattered over 0..n. */
        long existingKey(SplittableRandom rng) {
            if (zipfCdf == null) {
                return rng.nextLong(n);
            }
            double u = rng.nextDouble() * zipfCdf[zipfCdf.length - 1];
            int lo = 0;
            int hi = zipfCdf.length;
            while (lo < hi) {
                int mid = (lo + hi) >>> 1;
                if (zipfCdf[mid] < u) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            long rank = Math.min(lo, n - 1);
            // The prime `bench ops` uses; n stays below it (the Zipf table alone would not fit
            // in memory above), so the product fits in a long.
            return (rank * 2_147_483_647L) % n;
        }

        long ops(int phase) {
            return phase == 0 ? n : ops;
        }
    }

    private static void run(
            File base, Workload w, int valueBytes, long seed, long budget, boolean bloom,
            boolean print)
            throws Exception {
        Files.createDirectories(base.toPath());
        byte[][] values = new byte[4096][valueBytes];
        SplittableRandom valueRng = new SplittableRandom(seed);
        for (byte[] v : values) {
            for (int j = 0; j < v.length; j++) {
                v[j] = (byte) valueRng.nextInt(256);
            }
        }

        Opened opened = open(base, budget, bloom);
        RocksDBKeyedStateBackend<Long> backend = opened.backend();
        ValueStateDescriptor<byte[]> descriptor =
                new ValueStateDescriptor<>("bench", BytePrimitiveArraySerializer.INSTANCE);
        if (w.ttl) {
            descriptor.enableTimeToLive(StateTtlConfig.newBuilder(Duration.ofDays(7)).build());
        }
        ValueState<byte[]> state = backend.getPartitionedState(
                VoidNamespace.INSTANCE, VoidNamespaceSerializer.INSTANCE, descriptor);

        RocksDB db = backend.db;
        ColumnFamilyHandle cf = backend.getColumnFamilyHandle("bench");
        for (int p = 0; p < PHASES.length; p++) {
            // As `bench ops` does before each phase (`wait_for_compactions`, untimed): flush
            // the memtable and let compactions finish, so every phase starts from SST files.
            settle(db, List.of(cf));
            String levels = levels(db, cf);
            // The keys are drawn before the clock starts, as `bench ops` draws them.
            long[] keys = phaseKeys(p, w, seed);
            long start = System.nanoTime();
            long found = runPhase(backend, state, p, keys, values);
            double secs = (System.nanoTime() - start) / 1e9;
            long expected = p == 2 ? w.ops(p) : 0;
            if ((p == 2 || p == 3) && found != expected) {
                throw new IllegalStateException(
                        PHASES[p] + " found " + found + " keys, expected " + expected);
            }
            if (print) {
                System.out.printf(
                        "flink_phase=%s flink_ops_s=%.0f files_before=%s%n",
                        PHASES[p], w.ops(p) / secs, levels);
            }
        }
        opened.close();
        deleteRecursively(base);
    }

    /** A backend as {@link #open} builds it, with the resources its close releases. */
    record Opened(RocksDBKeyedStateBackend<Long> backend, RocksDBResourceContainer resources) {
        /** Disposes of the backend and releases the shared cache and write-buffer manager. */
        void close() throws Exception {
            backend.dispose();
            resources.close();
        }
    }

    /**
     * Flink's RocksDB keyed state backend in `base` as a TaskManager builds it with
     * `state.backend.rocksdb.memory.managed: true`: Long keys, {@link #KEY_GROUPS} key groups
     * all owned, `budget` bytes of managed memory, bloom filters as `bloom` says. FlinkStates
     * builds its backend here too, so both compare against the same configuration.
     */
    static Opened open(File base, long budget, boolean bloom) throws Exception {
        Builder<Long> b = builder(base, budget, bloom, LongSerializer.INSTANCE,
                new KeyGroupRange(0, KEY_GROUPS - 1), Collections.emptyList());
        return new Opened(b.builder().build(), b.resources());
    }

    /** A backend builder and the resources the backend's close releases. */
    record Builder<K>(RocksDBKeyedStateBackendBuilder<K> builder, RocksDBResourceContainer resources) {}

    /**
     * The builder of a backend in `base` as a TaskManager configures it with
     * `state.backend.rocksdb.memory.managed: true` (`budget` bytes of managed memory, bloom
     * filters as `bloom` says): `keys` serialized by `keySerializer`, the key groups `range`
     * of {@link #KEY_GROUPS}, restored from `handles` (none: empty). FlinkRescale builds its
     * backends here too.
     */
    static <K> Builder<K> builder(
            File base,
            long budget,
            boolean bloom,
            TypeSerializer<K> keySerializer,
            KeyGroupRange range,
            Collection<KeyedStateHandle> handles) {
        Configuration config = new Configuration();
        config.setString("state.backend.rocksdb.use-bloom-filter", Boolean.toString(bloom));
        RocksDBSharedResources shared = RocksDBMemoryControllerUtils.allocateRocksDBSharedResources(
                budget, 0.5, 0.1, false, RocksDBMemoryControllerUtils.RocksDBMemoryFactory.DEFAULT);
        OpaqueMemoryResource<RocksDBSharedResources> memory =
                new OpaqueMemoryResource<>(shared, budget, shared::close);
        RocksDBResourceContainer resources = new RocksDBResourceContainer(
                config, PredefinedOptions.DEFAULT, null, memory, base, false);
        ExecutionConfig executionConfig = new ExecutionConfig();
        RocksDBKeyedStateBackendBuilder<K> builder = new RocksDBKeyedStateBackendBuilder<>(
                "bench",
                FlinkOps.class.getClassLoader(),
                base,
                resources,
                name -> resources.getColumnOptions(),
                null,
                keySerializer,
                KEY_GROUPS,
                range,
                executionConfig,
                LocalRecoveryConfig.BACKUP_AND_RECOVERY_DISABLED,
                RocksDBPriorityQueueConfig.buildWithPriorityQueueType(
                        EmbeddedRocksDBStateBackend.PriorityQueueStateType.ROCKSDB),
                TtlTimeProvider.DEFAULT,
                LatencyTrackingStateConfig.disabled(),
                SizeTrackingStateConfig.disabled(),
                new UnregisteredMetricsGroup(),
                (name, value) -> {},
                handles,
                AbstractStateBackend.getCompressionDecorator(executionConfig),
                new CloseableRegistry());
        return new Builder<>(builder, resources);
    }

    /** The keys of phase `p`, slice by slice as `bench ops` cuts and seeds it. */
    private static long[] phaseKeys(int p, Workload w, long seed) {
        long n = w.n;
        long ops = w.ops(p);
        long[] keys = new long[(int) ops];
        for (int slice = 0; slice < SLICES; slice++) {
            long lo = ops * slice / SLICES;
            long hi = ops * (slice + 1) / SLICES;
            SplittableRandom rng = new SplittableRandom(seed ^ ((long) p << 32) ^ slice);
            for (long i = lo; i < hi; i++) {
                keys[(int) i] = switch (p) {
                    case 0 -> i;
                    case 3 -> n + rng.nextLong(n);
                    default -> w.existingKey(rng);
                };
            }
        }
        return keys;
    }

    /** One phase over `keys`; returns how many reads found a value. */
    private static long runPhase(
            RocksDBKeyedStateBackend<Long> backend,
            ValueState<byte[]> state,
            int p,
            long[] keys,
            byte[][] values)
            throws Exception {
        long found = 0;
        for (int i = 0; i < keys.length; i++) {
            byte[] value = values[i % values.length];
            backend.setCurrentKey(keys[i]);
            switch (p) {
                case 0:
                case 1:
                    state.update(value);
                    break;
                case 2:
                case 3:
                    found += state.value() != null ? 1 : 0;
                    break;
                default:
                    byte[] v = state.value();
                    if (v == null) {
                        v = new byte[0];
                    } else if (v.length > 0) {
                        v[0]++;
                    }
                    state.update(v);
            }
        }
        return found;
    }

    /** Flushes the states' memtables and waits until no flush or compaction is left. */
    static void settle(RocksDB db, List<ColumnFamilyHandle> cfs) throws Exception {
        try (FlushOptions flush = new FlushOptions().setWaitForFlush(true)) {
            for (ColumnFamilyHandle cf : cfs) {
                db.flush(flush, cf);
            }
        }
        while (compactionPending(db, cfs)
                || db.getLongProperty("rocksdb.num-running-compactions") > 0
                || db.getLongProperty("rocksdb.num-running-flushes") > 0) {
            Thread.sleep(20);
        }
    }

    private static boolean compactionPending(RocksDB db, List<ColumnFamilyHandle> cfs)
            throws Exception {
        for (ColumnFamilyHandle cf : cfs) {
            if (db.getLongProperty(cf, "rocksdb.compaction-pending") > 0) {
                return true;
            }
        }
        return false;
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

    static void deleteRecursively(File f) {
        File[] children = f.listFiles();
        if (children != null) {
            for (File c : children) {
                deleteRecursively(c);
            }
        }
        f.delete();
    }
}
