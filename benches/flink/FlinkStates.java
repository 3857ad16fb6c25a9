// `rockstate-bench states`'s workload (src/bin/rockstate-bench/bench_states.rs) through Flink's
// own RocksDB keyed state backend (EmbeddedRocksDBStateBackend, from the flink-dist jar that
// PyPI's apache-flink-libraries wheel bundles), so rockstate's list and map state figures can be
// set against Flink's on the same machine in the same minutes. `scripts/flink-bench.sh --states`
// compiles this file beside FlinkOps.java and runs it; see
// docs/decisions/0019-benchmark-method-and-flink-comparison.md.
//
// The states are those of flink-benchmarks' ListStateBenchmark and MapStateBenchmark, as
// `bench states` models them: `--keys N` Long keys (8 bytes big-endian as Flink serializes
// them), the void namespace, a ListState<Long> "list" of `--list-len` elements per key and a
// MapState<Long, Double> "map" of `--map-len` entries per key. The phases, with the names,
// semantics and operation counts of `bench states`:
//
// - list_fill: every key 0..N gets a list of list_len elements (one `update` per key);
// - list_append: `--ops M` single-element `add`s to random existing keys;
// - list_get: M `get`s of a random key's list, every element visited;
// - list_update: M replacements (`update`) of a random key's list by list_len elements;
// - map_fill: map_len `put`s per key, user keys 0..map_len (N * map_len operations);
// - map_update: M puts of (random key, r % map_len), over existing entries;
// - map_get: M gets of existing entries (r % map_len);
// - map_contains: M `contains` of r % (2 * map_len): half of them miss;
// - map_iterate: M visits of every entry of a random key's map (`entries()`);
// - map_is_empty: M `isEmpty` of random keys;
// - map_remove: M removals of (random key, r % map_len).
//
// The random keys and draws r are made before the clock starts, from a SplittableRandom seeded
// per phase (the sequences are not Rust's; the distribution is: uniform over the keys). As in
// `bench states`, a read phase that sees fewer entries than the state must hold fails the run,
// so a broken state cannot pass for a fast one. `--only S` runs only the phases whose name
// contains S (the fills always run, the later phases need them); `--ttl` gives both states a
// week's TTL (Flink's defaults: refreshed on create and write, expired values never returned,
// cleaned by the compaction filter), as `bench states --ttl` does. Key groups: 128 (Flink's
// default max parallelism, and rockstate's), the backend owns them all.
//
// Before each phase, untimed, both sides flush the memtables and wait for compactions
// (rockstate's `wait_for_compactions`), so every phase starts from SST files.
//
// Memory, bloom filters and compaction priority exactly as FlinkOps.java sets them: as a
// TaskManager with `state.backend.rocksdb.memory.managed: true` (Flink's default) configures
// it: one LRU cache with a write-buffer manager charged to it, from `--budget-bytes` (512 MiB,
// rockstate's default budget) of managed memory, write-buffer ratio 0.5, high-priority pool 0.1.
// `--bloom` sets `state.backend.rocksdb.use-bloom-filter: true` (Flink's default is off);
// `--low-priority-compaction` lowers the compaction pool to nice 19 as rockstate does by
// default (Flink does not).
//
// It lives in Flink's package only because RocksDBSharedResources is package-private there.
package org.apache.flink.state.rocksdb;

import java.io.File;
import java.nio.file.Files;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.StateTtlConfig;
import org.apache.flink.api.common.typeutils.base.DoubleSerializer;
import org.apache.flink.api.common.typeutils.base.LongSerializer;
import org.apache.flink.runtime.state.VoidNamespace;
import org.apache.flink.runtime.state.VoidNamespaceSerializer;
import org.rocksdb.ColumnFamilyHandle;
import org.rocksdb.Env;
import org.rocksdb.Priority;
import org.rocksdb.RocksDB;

public final class FlinkStates {
    /** The phases, in `bench states`'s order: the list phases, then the map phases. */
    private static final String[] PHASES = {
        "list_fill", "list_append", "list_get", "list_update",
        "map_fill", "map_update", "map_get", "map_contains", "map_iterate", "map_is_empty",
        "map_remove"
    };

    public static void main(String[] args) throws Exception {
        long keys = 100_000;
        int listLen = 100;
        int mapLen = 10;
        int ops = 200_000;
        long seed = 42;
        long budget = 512L << 20;
        boolean bloom = false;
        boolean lowPriority = false;
        boolean ttl = false;
        String only = null;
        long warmup = 20_000;
        String dir = null;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--keys": keys = Long.parseLong(args[++i]); break;
                case "--list-len": listLen = Integer.parseInt(args[++i]); break;
                case "--map-len": mapLen = Integer.parseInt(args[++i]); break;
                case "--ops": ops = Integer.parseInt(args[++i]); break;
                case "--seed": seed = Long.parseLong(args[++i]); break;
                case "--budget-bytes": budget = Long.parseLong(args[++i]); break;
                case "--bloom": bloom = true; break;
                case "--low-priority-compaction": lowPriority = true; break;
                case "--ttl": ttl = true; break;
                case "--only": only = args[++i]; break;
                case "--warmup-keys": warmup = Long.parseLong(args[++i]); break;
                case "--dir": dir = args[++i]; break;
                default: throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        if (keys < 1 || listLen < 1 || mapLen < 1) {
            // As `bench states` refuses them: the checks below need non-empty states.
            throw new IllegalArgumentException(
                    "--keys, --list-len and --map-len must be at least 1");
        }
        File root = dir == null
                ? Files.createTempDirectory("flink-states").toFile()
                : Files.createDirectories(new File(dir).toPath()).toFile();
        // Flink's own loader: extracts the frocksdbjni library bundled in flink-dist.
        EmbeddedRocksDBStateBackend.ensureRocksDBIsLoaded(root.getAbsolutePath());
        if (lowPriority) {
            // What rockstate's `low_priority_compaction` does: nice 19 for the compaction pool.
            Env.getDefault().lowerThreadPoolCPUPriority(Priority.LOW);
        }
        System.out.printf(
                "# flink states: keys=%d list_len=%d map_len=%d ops=%d bloom=%b "
                        + "low_priority_compaction=%b budget_bytes=%d warmup_keys=%d ttl=%s "
                        + "only=%s (Flink 2.3 EmbeddedRocksDBStateBackend, managed memory, "
                        + "PredefinedOptions.DEFAULT)%n",
                keys, listLen, mapLen, ops, bloom, lowPriority, budget, warmup,
                ttl ? "week" : "off", only == null ? "all" : only);
        // The JIT compiles the whole path first on a throw-away backend, so the figures are
        // those of a warm TaskManager.
        if (warmup > 0) {
            Workload small = new Workload(
                    warmup, listLen, mapLen, (int) Math.min(ops, warmup), ttl, only);
            run(new File(root, "warmup"), small, seed + 1, budget, bloom, false);
        }
        run(new File(root, "bench"), new Workload(keys, listLen, mapLen, ops, ttl, only),
                seed, budget, bloom, true);
        FlinkOps.deleteRecursively(root);
    }

    /** Keys, state sizes, operations per phase after the fills, TTL, phase filter. */
    private record Workload(
            long keys, int listLen, int mapLen, int ops, boolean ttl, String only) {
        boolean runs(String phase) {
            return phase.endsWith("_fill") || only == null || phase.contains(only);
        }
    }

    private static void run(
            File base, Workload w, long seed, long budget, boolean bloom, boolean print)
            throws Exception {
        Files.createDirectories(base.toPath());

        // The backend exactly as FlinkOps builds it.
        FlinkOps.Opened opened = FlinkOps.open(base, budget, bloom);
        RocksDBKeyedStateBackend<Long> backend = opened.backend();
        ListStateDescriptor<Long> listDescriptor =
                new ListStateDescriptor<>("list", LongSerializer.INSTANCE);
        MapStateDescriptor<Long, Double> mapDescriptor =
                new MapStateDescriptor<>("map", LongSerializer.INSTANCE, DoubleSerializer.INSTANCE);
        if (w.ttl()) {
            StateTtlConfig week = StateTtlConfig.newBuilder(Duration.ofDays(7)).build();
            listDescriptor.enableTimeToLive(week);
            mapDescriptor.enableTimeToLive(week);
        }
        ListState<Long> list = backend.getPartitionedState(
                VoidNamespace.INSTANCE, VoidNamespaceSerializer.INSTANCE, listDescriptor);
        MapState<Long, Double> map = backend.getPartitionedState(
                VoidNamespace.INSTANCE, VoidNamespaceSerializer.INSTANCE, mapDescriptor);
        States s = new States(backend, list, map, w);

        RocksDB db = backend.db;
        List<ColumnFamilyHandle> cfs = List.of(
                backend.getColumnFamilyHandle("list"), backend.getColumnFamilyHandle("map"));
        for (String phase : PHASES) {
            if (!w.runs(phase)) {
                continue;
            }
            // As `bench states` does before each phase (`wait_for_compactions`, untimed):
            // flush the memtables and let compactions finish, so every phase starts from SST
            // files.
            FlinkOps.settle(db, cfs);
            // The keys and draws are made before the clock starts, as `bench states` makes them.
            SplittableRandom rng = new SplittableRandom(seed ^ fnv(phase));
            long[] draws = new long[2 * w.ops()];
            for (int i = 0; i < w.ops(); i++) {
                draws[2 * i] = rng.nextLong(w.keys());
                draws[2 * i + 1] = rng.nextLong();
            }
            long start = System.nanoTime();
            long ops = s.phase(phase, draws);
            double secs = (System.nanoTime() - start) / 1e9;
            s.check(phase, draws);
            if (print) {
                System.out.printf("flink_phase=%s flink_ops_s=%.0f ops=%d%n", phase, ops / secs, ops);
            }
        }
        opened.close();
        FlinkOps.deleteRecursively(base);
    }

    /** The states, the workload and what the last phase's reads saw. */
    private static final class States {
        final RocksDBKeyedStateBackend<Long> backend;
        final ListState<Long> list;
        final MapState<Long, Double> map;
        final Workload w;
        /** The list_len elements every list is filled and updated with (as `bench states`'s). */
        final List<Long> elements;
        /** Entries (or hits) the last phase's reads saw. */
        long visited;

        States(RocksDBKeyedStateBackend<Long> backend, ListState<Long> list,
                MapState<Long, Double> map, Workload w) {
            this.backend = backend;
            this.list = list;
            this.map = map;
            this.w = w;
            elements = new ArrayList<>(w.listLen());
            for (long i = 0; i < w.listLen(); i++) {
                elements.add(i * 0x9e37_79b9_7f4a_7c15L);
            }
        }

        /** Runs `phase` over `draws` (key, r pairs); returns its operation count. */
        long phase(String phase, long[] draws) throws Exception {
            long mapLen = w.mapLen();
            int ops = w.ops();
            visited = 0;
            switch (phase) {
                case "list_fill":
                    for (long k = 0; k < w.keys(); k++) {
                        backend.setCurrentKey(k);
                        list.update(elements);
                    }
                    return w.keys();
                case "list_append":
                    for (int i = 0; i < ops; i++) {
                        backend.setCurrentKey(draws[2 * i]);
                        list.add(draws[2 * i + 1]);
                    }
                    return ops;
                case "list_get":
                    for (int i = 0; i < ops; i++) {
                        backend.setCurrentKey(draws[2 * i]);
                        Iterable<Long> got = list.get();
                        if (got != null) {
                            for (Long e : got) {
                                visited += e != null ? 1 : 0;
                            }
                        }
                    }
                    return ops;
                case "list_update":
                    for (int i = 0; i < ops; i++) {
                        backend.setCurrentKey(draws[2 * i]);
                        list.update(elements);
                    }
                    return ops;
                case "map_fill":
                    for (long k = 0; k < w.keys(); k++) {
                        backend.setCurrentKey(k);
                        for (long u = 0; u < mapLen; u++) {
                            map.put(u, u + 0.5);
                        }
                    }
                    return w.keys() * mapLen;
                case "map_update":
                    for (int i = 0; i < ops; i++) {
                        long r = draws[2 * i + 1];
                        backend.setCurrentKey(draws[2 * i]);
                        map.put(Long.remainderUnsigned(r, mapLen), (double) r);
                    }
                    return ops;
                case "map_get":
                    for (int i = 0; i < ops; i++) {
                        backend.setCurrentKey(draws[2 * i]);
                        visited += map.get(Long.remainderUnsigned(draws[2 * i + 1], mapLen))
                                != null ? 1 : 0;
                    }
                    return ops;
                case "map_contains":
                    for (int i = 0; i < ops; i++) {
                        backend.setCurrentKey(draws[2 * i]);
                        // Half the lookups miss: user keys map_len.. are never put.
                        visited += map.contains(
                                Long.remainderUnsigned(draws[2 * i + 1], 2 * mapLen)) ? 1 : 0;
                    }
                    return ops;
                case "map_iterate":
                    for (int i = 0; i < ops; i++) {
                        backend.setCurrentKey(draws[2 * i]);
                        for (Map.Entry<Long, Double> e : map.entries()) {
                            visited += e.getValue() != null ? 1 : 0;
                        }
                    }
                    return ops;
                case "map_is_empty":
                    for (int i = 0; i < ops; i++) {
                        backend.setCurrentKey(draws[2 * i]);
                        visited += map.isEmpty() ? 0 : 1;
                    }
                    return ops;
                case "map_remove":
                    for (int i = 0; i < ops; i++) {
                        backend.setCurrentKey(draws[2 * i]);
                        map.remove(Long.remainderUnsigned(draws[2 * i + 1], mapLen));
                    }
                    return ops;
                default:
                    throw new IllegalArgumentException("unknown phase " + phase);
            }
        }

        /**
         * Fails the run when a read phase saw fewer entries than the state must hold (the
         * checks of `bench states`), so a broken state cannot pass for a fast one.
         */
        void check(String phase, long[] draws) {
            long ops = w.ops();
            long expectedAtLeast;
            switch (phase) {
                // Every list holds list_len elements at least (appends only add).
                case "list_get": expectedAtLeast = ops * w.listLen(); break;
                case "map_get":
                case "map_is_empty": expectedAtLeast = ops; break;
                case "map_iterate": expectedAtLeast = ops * w.mapLen(); break;
                case "map_contains": {
                    // Not in `bench states`, but as cheap: every map still holds all of its
                    // user keys 0..map_len here, so exactly the draws below map_len hit.
                    expectedAtLeast = 0;
                    for (int i = 0; i < ops; i++) {
                        if (Long.remainderUnsigned(draws[2 * i + 1], 2L * w.mapLen())
                                < w.mapLen()) {
                            expectedAtLeast++;
                        }
                    }
                    if (visited != expectedAtLeast) {
                        throw new IllegalStateException("phase " + phase + " saw " + visited
                                + " hits, expected " + expectedAtLeast);
                    }
                    break;
                }
                default: expectedAtLeast = 0;
            }
            if (visited < expectedAtLeast) {
                throw new IllegalStateException("phase " + phase + " saw " + visited
                        + " entries, expected " + expectedAtLeast);
            }
        }
    }

    /** FNV-1a of `s`: a phase's seed offset, as `bench states` derives it. */
    private static long fnv(String s) {
        long h = 0xcbf2_9ce4_8422_2325L;
        for (byte b : s.getBytes(java.nio.charset.StandardCharsets.UTF_8)) {
            h = (h ^ (b & 0xff)) * 0x0100_0000_01b3L;
        }
        return h;
    }
}
