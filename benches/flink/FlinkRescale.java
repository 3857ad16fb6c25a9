// `bench rescale`'s restores through Flink's own RocksDB keyed state backend
// (EmbeddedRocksDBStateBackend with incremental checkpoints, from the flink-dist jar that PyPI's
// apache-flink-libraries wheel bundles), so rockstate's restore and rescale times can be set
// against Flink's on the same machine in the same minutes. scripts/flink-bench.sh --rescale
// fetches the jars, compiles this file and runs it beside `rockstate-bench rescale`.
//
// The workload is the shape of flink-benchmarks' RocksdbStateBackendRescalingBenchmarkExecutor
// (with its defaults: 10M keys of 96 bytes, 128-byte values, 512 MiB of managed memory, max
// parallelism 128) and the keys `bench rescale --key-bytes` writes: key k is k as 8 bytes
// big-endian followed by bytes of a SplitMix64 sequence seeded by k. One ValueState<byte[]>
// in the void namespace, the values random. Key groups are Flink's own for the key object
// (`KeyGroupRangeAssignment`: a byte[] key hashes by identity, so the keys spread over the
// key groups as a hash spreads them).
//
// Measured, each the median of `--repeat` runs into fresh directories (the time of the
// backend builder's `build()`, which downloads, opens and, for a rescale, clips or merges):
// - `plain_restore`: checkpoint 1 (the whole state, one backend) restored into one backend
//   owning every key group;
// - `1->2`: checkpoint 1 restored into subtask 0 of parallelism 2 (key groups 0..=63), as the
//   benchmark's RESCALE_OUT times it (rockstate's `rescale=1->2` restores both halves at once);
// - `2->1`: two backends loaded separately (the keys of their own key groups), checkpoint 2
//   of both restored into one backend owning every key group, as RESCALE_IN times it;
//   `2->1-plain`: the same two handles each restored into its own range, one after the other;
// - `--case P->Q` (repeatable): P backends loaded separately, their checkpoint restored at
//   parallelism Q, subtask after subtask (each given the handles whose key groups meet its
//   range, as Flink's StateAssignmentOperation assigns them), the sum of the Q restores;
//   `P->Q-plain`: the P handles each restored into its own range, one after the other (as
//   flink-benchmarks' RocksIncrementalCheckpointReScaleBenchmark, 3 -> 4, times one subtask
//   at a time).
// Checkpoints go to a FsCheckpointStreamFactory on the local file system (what
// FileSystemCheckpointStorage with a file:// path gives the benchmark), under `--checkpoint-dir`
// (default: beside the backends), so a restore copies every file. (rockstate's LocalStorage
// hard-links SSTs on the same file system and reads each once for its CRC; with its storage on
// another file system, `bench rescale --storage file:///other/dir`, it copies them too.)
//
// `--ingest-db` turns on Flink's ingest-DB restore mode
// (`state.backend.rocksdb.use-ingest-db-restore-mode`, off by default), its fast rescaling path;
// everything else is Flink's defaults for these settings (RocksDBConfigurableOptions), with 4
// transfer threads (`bench rescale --threads` defaults to 4).
//
// It lives in Flink's package only because the builder's setters are package-private.
package org.apache.flink.state.rocksdb;

import java.io.File;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.RunnableFuture;

import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeutils.base.array.BytePrimitiveArraySerializer;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.fs.Path;
import org.apache.flink.runtime.checkpoint.CheckpointOptions;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyGroupRangeAssignment;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.SnapshotResult;
import org.apache.flink.runtime.state.VoidNamespace;
import org.apache.flink.runtime.state.VoidNamespaceSerializer;
import org.apache.flink.runtime.state.filesystem.FsCheckpointStreamFactory;

public final class FlinkRescale {
    private static final int KEY_GROUPS = 128;
    private static final int TRANSFER_THREADS = 4;
    /** Flink's default `state.storage.fs.memory-threshold`: smaller state goes inline. */
    private static final int INLINE_THRESHOLD = 20 * 1024;

    private final File root;
    private final long budget;
    private final boolean ingestDb;
    private final FsCheckpointStreamFactory streams;
    private int dirs = 0;

    private FlinkRescale(File root, File chk, long budget, boolean ingestDb) throws Exception {
        this.root = root;
        this.budget = budget;
        this.ingestDb = ingestDb;
        File shared = new File(chk, "shared");
        Files.createDirectories(shared.toPath());
        this.streams = new FsCheckpointStreamFactory(
                FileSystem.getLocalFileSystem(),
                new Path(chk.toURI()),
                new Path(shared.toURI()),
                INLINE_THRESHOLD,
                4096);
    }

    public static void main(String[] args) throws Exception {
        long n = 10_000_000;
        int keyBytes = 96;
        int valueBytes = 128;
        long seed = 42;
        long budget = 512L << 20;
        int repeat = 1;
        boolean ingestDb = false;
        String dir = null;
        String checkpointDir = null;
        List<int[]> cases = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--keys": n = Long.parseLong(args[++i]); break;
                case "--key-bytes": keyBytes = Integer.parseInt(args[++i]); break;
                case "--value-bytes": valueBytes = Integer.parseInt(args[++i]); break;
                case "--seed": seed = Long.parseLong(args[++i]); break;
                case "--budget-bytes": budget = Long.parseLong(args[++i]); break;
                case "--repeat": repeat = Integer.parseInt(args[++i]); break;
                case "--ingest-db": ingestDb = true; break;
                case "--dir": dir = args[++i]; break;
                case "--checkpoint-dir": checkpointDir = args[++i]; break;
                case "--case": {
                    String[] pq = args[++i].split("->");
                    cases.add(new int[] {Integer.parseInt(pq[0]), Integer.parseInt(pq[1])});
                    break;
                }
                default: throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        if (keyBytes < 8) {
            throw new IllegalArgumentException("--key-bytes must be at least 8");
        }
        File root = dir == null
                ? Files.createTempDirectory("flink-rescale").toFile()
                : Files.createDirectories(new File(dir).toPath()).toFile();
        EmbeddedRocksDBStateBackend.ensureRocksDBIsLoaded(root.getAbsolutePath());
        System.out.printf(
                "# flink rescale: keys=%d key_bytes=%d value_bytes=%d budget_bytes=%d repeat=%d "
                        + "ingest_db=%b threads=%d checkpoint_dir=%s (Flink 2.3 "
                        + "EmbeddedRocksDBStateBackend, incremental checkpoints)%n",
                n, keyBytes, valueBytes, budget, repeat, ingestDb, TRANSFER_THREADS,
                checkpointDir == null ? "beside the backends" : checkpointDir);
        File chk = checkpointDir == null
                ? new File(root, "checkpoints")
                : Files.createTempDirectory(
                        Files.createDirectories(new File(checkpointDir).toPath()), "flink-rescale")
                        .toFile();
        FlinkRescale bench = new FlinkRescale(root, chk, budget, ingestDb);
        bench.run(n, keyBytes, valueBytes, seed, repeat);
        for (int c = 0; c < cases.size(); c++) {
            bench.rescaleCase(cases.get(c)[0], cases.get(c)[1], 20 + c, n, keyBytes, valueBytes,
                    seed, repeat);
        }
        FlinkOps.deleteRecursively(chk);
        FlinkOps.deleteRecursively(root);
    }

    private void run(long n, int keyBytes, int valueBytes, long seed, int repeat)
            throws Exception {
        KeyGroupRange all = new KeyGroupRange(0, KEY_GROUPS - 1);
        KeyGroupRange[] halves = {
            KeyGroupRange.of(0, KEY_GROUPS / 2 - 1), KeyGroupRange.of(KEY_GROUPS / 2, KEY_GROUPS - 1)
        };

        // Source state and checkpoint 1.
        Opened src = open(all, Collections.emptyList());
        load(List.of(src), n, keyBytes, valueBytes, seed);
        long t = System.nanoTime();
        KeyedStateHandle one = snapshot(src, 1);
        System.out.printf(
                "flink_checkpoint=1 secs=%.3f state_bytes=%d%n",
                (System.nanoTime() - t) / 1e9, one.getStateSize());
        src.close();

        double plain = timed("plain_restore", repeat, () -> List.of(open(all, List.of(one))));
        double out = timed("1->2", repeat, () -> List.of(open(halves[0], List.of(one))));

        // Two halves loaded separately, as a job that ran at parallelism 2 has them.
        List<Opened> own = List.of(open(halves[0], Collections.emptyList()),
                open(halves[1], Collections.emptyList()));
        load(own, n, keyBytes, valueBytes, seed);
        List<KeyedStateHandle> two = new ArrayList<>();
        for (Opened o : own) {
            two.add(snapshot(o, 2));
            o.close();
        }
        double in = timed("2->1", repeat, () -> List.of(open(all, two)));
        double inPlain = timed("2->1-plain", repeat, () -> {
            List<Opened> restored = new ArrayList<>();
            for (int i = 0; i < 2; i++) {
                restored.add(open(halves[i], List.of(two.get(i))));
            }
            return restored;
        });
        System.out.printf(
                "flink_rescale=1->2 secs=%.3f plain_restore_secs=%.3f ratio=%.3f%n",
                out, plain, plain / out);
        System.out.printf(
                "flink_rescale=2->1 secs=%.3f plain_restore_secs=%.3f ratio=%.3f%n",
                in, inPlain, inPlain / in);
    }

    /** `--case P->Q`: see the file's comment. */
    private void rescaleCase(int p, int q, long id, long n, int keyBytes, int valueBytes,
            long seed, int repeat) throws Exception {
        List<Opened> parts = new ArrayList<>();
        for (int i = 0; i < p; i++) {
            parts.add(open(rangeOf(p, i), Collections.emptyList()));
        }
        load(parts, n, keyBytes, valueBytes, seed);
        List<KeyedStateHandle> handles = new ArrayList<>();
        for (Opened o : parts) {
            handles.add(snapshot(o, id));
            o.close();
        }
        double plain = timed(p + "->" + q + "-plain", repeat, () -> {
            List<Opened> restored = new ArrayList<>();
            for (int i = 0; i < p; i++) {
                restored.add(open(rangeOf(p, i), List.of(handles.get(i))));
            }
            return restored;
        });
        double rescaled = timed(p + "->" + q, repeat, () -> {
            List<Opened> restored = new ArrayList<>();
            for (int i = 0; i < q; i++) {
                KeyGroupRange range = rangeOf(q, i);
                List<KeyedStateHandle> mine = new ArrayList<>();
                for (KeyedStateHandle h : handles) {
                    if (h.getKeyGroupRange().getIntersection(range).getNumberOfKeyGroups() > 0) {
                        mine.add(h);
                    }
                }
                restored.add(open(range, mine));
            }
            return restored;
        });
        System.out.printf(
                "flink_rescale=%d->%d secs=%.3f plain_restore_secs=%.3f ratio=%.3f%n",
                p, q, rescaled, plain, plain / rescaled);
    }

    /** Subtask `i` of parallelism `p`'s key groups, as Flink assigns them. */
    private static KeyGroupRange rangeOf(int p, int i) {
        return KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex(KEY_GROUPS, p, i);
    }

    /** What a timed run returns: the backends to close after the clock stopped. */
    private interface Run {
        List<Opened> run() throws Exception;
    }

    /**
     * Median seconds of `repeat` runs of `run`; each run's backends closed untimed. Before each
     * run, untimed, the file systems' dirty pages are written back (`sync`), as `bench rescale`
     * does before its timed restores.
     */
    private double timed(String label, int repeat, Run run) throws Exception {
        double[] secs = new double[repeat];
        for (int r = 0; r < repeat; r++) {
            if (new ProcessBuilder("sync").inheritIO().start().waitFor() != 0) {
                throw new IllegalStateException("sync failed");
            }
            long t = System.nanoTime();
            List<Opened> opened = run.run();
            secs[r] = (System.nanoTime() - t) / 1e9;
            for (Opened o : opened) {
                o.close();
            }
        }
        Arrays.sort(secs);
        double median = secs[repeat / 2];
        System.out.printf("flink_restore=%s secs=%.3f%n", label, median);
        return median;
    }

    /** Writes keys 0..n, each into the one of `backends` owning its key group. */
    private static void load(List<Opened> backends, long n, int keyBytes, int valueBytes, long seed)
            throws Exception {
        ValueStateDescriptor<byte[]> descriptor =
                new ValueStateDescriptor<>("bench", BytePrimitiveArraySerializer.INSTANCE);
        List<ValueState<byte[]>> states = new ArrayList<>();
        for (Opened o : backends) {
            states.add(o.backend().getPartitionedState(
                    VoidNamespace.INSTANCE, VoidNamespaceSerializer.INSTANCE, descriptor));
        }
        SplittableRandom rng = new SplittableRandom(seed);
        byte[] value = new byte[valueBytes];
        for (long k = 0; k < n; k++) {
            byte[] key = keyOf(k, keyBytes);
            int group = KeyGroupRangeAssignment.assignToKeyGroup(key, KEY_GROUPS);
            for (int i = 0; i < backends.size(); i++) {
                RocksDBKeyedStateBackend<byte[]> b = backends.get(i).backend();
                if (b.getKeyGroupRange().contains(group)) {
                    for (int j = 0; j < value.length; j++) {
                        value[j] = (byte) rng.nextInt(256);
                    }
                    b.setCurrentKey(key);
                    states.get(i).update(value.clone());
                    break;
                }
            }
        }
    }

    /** Key k: k big-endian in 8 bytes, then bytes of a SplitMix64 sequence seeded by k. */
    private static byte[] keyOf(long k, int keyBytes) {
        byte[] key = new byte[keyBytes];
        for (int i = 0; i < 8; i++) {
            key[i] = (byte) (k >>> (56 - 8 * i));
        }
        long x = k;
        for (int at = 8; at < keyBytes; at += 8) {
            x += 0x9E3779B97F4A7C15L;
            long z = x;
            z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
            z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
            z ^= z >>> 31;
            for (int i = 0; i < 8 && at + i < keyBytes; i++) {
                key[at + i] = (byte) (z >>> (8 * i));
            }
        }
        return key;
    }

    /** An incremental checkpoint `id` of `o`, written to the local checkpoint directory. */
    private KeyedStateHandle snapshot(Opened o, long id) throws Exception {
        RunnableFuture<SnapshotResult<KeyedStateHandle>> future = o.backend().snapshot(
                id, id, streams, CheckpointOptions.forCheckpointWithDefaultLocation());
        future.run();
        return future.get().getJobManagerOwnedSnapshot();
    }

    /** A backend and the resources and directory its close releases. */
    private record Opened(
            RocksDBKeyedStateBackend<byte[]> backend, RocksDBResourceContainer resources, File dir) {
        void close() throws Exception {
            backend.dispose();
            resources.close();
            FlinkOps.deleteRecursively(dir);
        }
    }

    /**
     * A backend for `range` in a fresh directory, restored from `handles` (none: empty), with
     * incremental checkpoints and `budget` bytes of managed memory (FlinkOps.builder).
     */
    private Opened open(KeyGroupRange range, Collection<KeyedStateHandle> handles)
            throws Exception {
        File base = new File(root, "backend-" + dirs++);
        Files.createDirectories(base.toPath());
        FlinkOps.Builder<byte[]> b = FlinkOps.builder(
                base, budget, false, BytePrimitiveArraySerializer.INSTANCE, range, handles);
        RocksDBKeyedStateBackend<byte[]> backend = b.builder()
                .setEnableIncrementalCheckpointing(true)
                .setNumberOfTransferingThreads(TRANSFER_THREADS)
                .setUseIngestDbRestoreMode(ingestDb
                        || RocksDBConfigurableOptions.USE_INGEST_DB_RESTORE_MODE.defaultValue())
                .setOverlapFractionThreshold(
                        RocksDBConfigurableOptions.RESTORE_OVERLAP_FRACTION_THRESHOLD.defaultValue())
                .setIncrementalRestoreAsyncCompactAfterRescale(
                        RocksDBConfigurableOptions.INCREMENTAL_RESTORE_ASYNC_COMPACT_AFTER_RESCALE
                                .defaultValue())
                .setRescalingUseDeleteFilesInRange(
                        RocksDBConfigurableOptions.USE_DELETE_FILES_IN_RANGE_DURING_RESCALING
                                .defaultValue())
                .build();
        return new Opened(backend, b.resources(), base);
    }
}
