#!/usr/bin/env bash
# Runs `bench ops`'s workload through Flink 2.3's own RocksDB keyed state backend
# (benches/flink/FlinkOps.java) and through rockstate alone (`bench ops --solo-only`), in turns
# on this machine, and prints each phase's median ops/s per system and rockstate / Flink.
#
#   bash scripts/flink-bench.sh [--rounds R] [--keys N] [--value-bytes B] [--ops M]
#                               [--zipf S] [--ttl] [--budget-bytes BYTES]
#   bash scripts/flink-bench.sh --matrix [--rounds R] [--only SUBSTRING]
#   bash scripts/flink-bench.sh --states [--rounds R] [--keys N] [--ops M] [--list-len L]
#                               [--map-len E] [--ttl] [--budget-bytes BYTES] [--only SUBSTRING]
#   bash scripts/flink-bench.sh --rescale [--rounds R] [--keys N] [--key-bytes K]
#                               [--value-bytes B] [--repeat P] [--budget-bytes BYTES]
#                               [--storage-dir DIR] [--case 'P->Q' ...]
#
# `--matrix` runs the cells of `rockstate-bench matrix` with its defaults (state 0.5x and 4x a
# 128 MiB budget, uniform and Zipf 0.99 keys, 100 B and 1 KiB values, plain and a week's TTL,
# 500k operations per phase after the insert), both systems on the same budget (Flink's managed
# memory, rockstate's memory budget), one summary line per cell and phase; `--only` keeps the
# cells whose name (`fits/zipf/1024B/ttl`) contains it.
#
# `--states` runs `rockstate-bench states`'s list and map state workload instead (the shape of
# flink-benchmarks' ListStateBenchmark and MapStateBenchmark: 100k Long keys, a ListState<Long>
# of 100 elements and a MapState<Long, Double> of 10 entries per key, 200k operations per phase
# after the fills, phases list_fill ... map_remove), on the Flink side through
# benches/flink/FlinkStates.java; one summary line per phase, under cell `states`. `--only`
# there keeps the phases whose name contains it (the fills always run).
#
# `--rescale` runs `rockstate-bench rescale` and benches/flink/FlinkRescale.java (Flink's
# incremental checkpoints and restores; defaults: flink-benchmarks' rescaling shape, 10M keys of
# 96 bytes with 128-byte values, 512 MiB per backend, `--repeat 1` timed restore per round)
# and prints the median seconds of a plain restore, of 1 -> 2, of 2 -> 1 and of each `--case`
# per system, and Flink's time over rockstate's (`speedup`). Flink runs with its defaults and, as
# `flink_ingest_db`, with its ingest-DB restore mode. Both restore from local files: by default
# rockstate's LocalStorage hard-links SSTs (reading each once for its CRC) where Flink's file
# system checkpoint storage copies them; `--storage-dir DIR` puts both systems' checkpoints in
# DIR (e.g. /dev/shm, another file system than the backends'), where both copy every file.
# `--case 'P->Q'` (repeatable) adds a rescale of a job that ran at parallelism P to Q on both
# sides, every new instance restored one after the other (`bench rescale --case`).
#
# Flink comes from PyPI's apache-flink-libraries wheel (its flink-dist jar bundles the RocksDB
# state backend and FRocksDB's JNI library); the wheel and the compiled class are cached under
# target/flink-bench. Needs a JDK 17 (installed through apt when javac is missing) and python3.
# The rockstate side is target/release/rockstate-bench, built here unless ROCKSTATE_BENCH names
# a binary. Each round runs rockstate, Flink with its defaults (no bloom filter, compactions at
# normal priority), and Flink tuned with what rockstate does by default and Flink can be
# configured to do (`state.backend.rocksdb.use-bloom-filter: true`, compaction pool at nice 19),
# 10 s apart, in an order that rotates from round to round, so load from elsewhere on a shared
# machine lands on all three alike. Not a test: nothing here asserts a speed.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3
matrix=0
states=0
rescale=0
key_bytes=96
repeat=1
storage_dir=""
cases=()
only=""
keys="-" # `-`: the mode's default (1000000 for `bench ops`, 100000 for `--states`)
value_bytes=100
ops="-"
zipf="-"
ttl=0
budget=$((512 << 20))
list_len=100
map_len=10
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --keys) keys="$2"; shift 2 ;;
    --value-bytes) value_bytes="$2"; shift 2 ;;
    --ops) ops="$2"; shift 2 ;;
    --zipf) zipf="$2"; shift 2 ;;
    --ttl) ttl=1; shift ;;
    --budget-bytes) budget="$2"; shift 2 ;;
    --matrix) matrix=1; shift ;;
    --states) states=1; shift ;;
    --rescale) rescale=1; shift ;;
    --key-bytes) key_bytes="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --storage-dir) storage_dir="$2"; shift 2 ;;
    --case) cases+=("$2"); shift 2 ;;
    --list-len) list_len="$2"; shift 2 ;;
    --map-len) map_len="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    *) echo "flink-bench: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$rounds" -ge 1 ] || { echo "flink-bench: --rounds must be at least 1" >&2; exit 2; }
[ $((matrix + states + rescale)) -le 1 ] || {
  echo "flink-bench: --matrix, --states and --rescale are separate modes" >&2
  exit 2
}
if [ "$rescale" = 1 ]; then
  # flink-benchmarks' RocksdbStateBackendRescalingBenchmarkExecutor: 10M keys, 128-byte values.
  [ "$keys" != - ] || keys=10000000
  [ "$value_bytes" != 100 ] || value_bytes=128
elif [ "$states" = 1 ]; then
  # `bench states`'s defaults, given explicitly so both sides surely run the same workload.
  [ "$keys" != - ] || keys=100000
  [ "$ops" != - ] || ops=200000
else
  [ "$keys" != - ] || keys=1000000
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ! command -v javac >/dev/null 2>&1; then
  echo "flink-bench: installing openjdk-17-jdk-headless" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openjdk-17-jdk-headless >/dev/null
fi

cache=target/flink-bench
wheel="$cache/apache_flink_libraries-2.3.0-py2.py3-none-any.whl"
mkdir -p "$cache"
if [ ! -f "$wheel" ]; then
  echo "flink-bench: fetching apache-flink-libraries 2.3.0 (PyPI, ~330 MB)" >&2
  python3 -m pip download -q --no-deps -d "$cache" apache-flink-libraries==2.3.0
fi
if [ ! -d "$cache/pyflink/lib" ]; then
  python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("pyflink/lib/")])' "$wheel" "$cache"
fi
cp_jars=$(ls "$cache"/pyflink/lib/*.jar | paste -sd: -)
mkdir -p "$cache/classes"
javac -nowarn -cp "$cp_jars" -d "$cache/classes" benches/flink/FlinkOps.java \
  benches/flink/FlinkStates.java benches/flink/FlinkRescale.java

bench="${ROCKSTATE_BENCH:-}"
if [ -z "$bench" ]; then
  cargo build -q --release --bin rockstate-bench
  bench=./target/release/rockstate-bench
fi

out="$cache/last-run.txt"
log="$cache/flink-stderr.log"
: > "$out"
: > "$log"

# run_rotated <round>: the three entries of `runs`, 10 s apart, starting one further each
# round, so load from elsewhere on a shared machine lands on all three alike.
run_rotated() {
  local r="$1" i
  for i in 0 1 2; do
    ${runs[$(( (i + r - 1) % 3 ))]}
    sleep 10
  done
}

if [ "$rescale" = 1 ]; then
  args=(--keys "$keys" --key-bytes "$key_bytes" --value-bytes "$value_bytes" --repeat "$repeat")
  for c in "${cases[@]}"; do args+=(--case "$c"); done
  rockstate_storage=() flink_storage=()
  if [ -n "$storage_dir" ]; then
    storage_dir=$(realpath "$storage_dir")
    rockstate_storage=(--storage "file://$storage_dir/rockstate-bench")
    flink_storage=(--checkpoint-dir "$storage_dir")
  fi
  rescale_rockstate() {
    # Without local copies, as Flink's side (and flink-benchmarks) runs: every restore reads
    # the checkpoint's files from storage.
    "$bench" rescale "${args[@]}" "${rockstate_storage[@]}" --budget-mib $((budget >> 20)) \
      --no-local-recovery \
      | sed 's|^|rockstate |' | tee -a "$out"
    [ -z "$storage_dir" ] || rm -rf "$storage_dir/rockstate-bench"
  }
  rescale_flink() { # rescale_flink <label> [FlinkRescale flags...]
    local label="$1"
    shift
    if ! java -Xmx2g -cp "$cache/classes:$cp_jars" org.apache.flink.state.rocksdb.FlinkRescale \
      "$@" "${args[@]}" "${flink_storage[@]}" --budget-bytes "$budget" 2>>"$log" \
      >"$cache/flink-out.txt"; then
      echo "flink-bench: FlinkRescale failed; the end of $log:" >&2
      tail -20 "$log" >&2
      exit 1
    fi
    sed "s|^|$label |" "$cache/flink-out.txt" | tee -a "$out"
  }
  runs=(rescale_rockstate "rescale_flink flink" "rescale_flink flink_ingest_db --ingest-db")
  for r in $(seq 1 "$rounds"); do
    echo "flink-bench: rescale round $r of $rounds" >&2
    run_rotated "$r"
  done
  python3 - "$out" <<'EOF'
import re, statistics, sys
secs, order = {}, []
for line in open(sys.argv[1]):
    # rockstate: `rescale=1->2 secs=.. plain_restore_secs=..` (and `rescale=2->1 ...`);
    # Flink: `flink_rescale=1->2 secs=.. plain_restore_secs=..`.
    m = re.match(r"(rockstate|flink|flink_ingest_db) (?:flink_)?rescale=(\d+->\d+) "
                 r"secs=([\d.]+) plain_restore_secs=([\d.]+)", line)
    if m:
        system, case = m.group(1), m.group(2)
        secs.setdefault((system, case), []).append(float(m.group(3)))
        plain = "plain_restore" if case == "1->2" else case + "-plain"
        for c in [plain, case]:
            if c not in order:
                order.append(c)
        secs.setdefault((system, plain), []).append(float(m.group(4)))
print("# medians over the rounds, seconds; speedup = Flink's time / rockstate's. rockstate's "
      "1->2 restores both halves at once, Flink's subtask 0 alone (as flink-benchmarks times "
      "it); P->Q-plain: the P instances' state restored one after the other into their own "
      "ranges; other P->Q cases restore their Q instances one after the other on both sides")
for case in order:
    ours = statistics.median(secs[("rockstate", case)])
    row = f"case={case} rockstate_secs={ours:.3f}"
    for system in ["flink", "flink_ingest_db"]:
        theirs = statistics.median(secs[(system, case)])
        row += f" {system}_secs={theirs:.3f} speedup_vs_{system}={theirs / max(ours, 1e-6):.1f}"
    print(row)
EOF
  exit 0
fi

# The cell being run: its name, the flags each side gets, and what each side runs: FlinkOps and
# `bench ops --solo-only` by default, FlinkStates and `bench states` with `--states`.
cell="" common=() flink_budget=() rockstate_budget=()
# FlinkOps inserts keys 0..N in order: so does rockstate's side (`--insert-order ascending`).
flink_main=FlinkOps rockstate_cmd=(ops --solo-only --no-reference --insert-order ascending)
set_cell() { # set_cell <name> <keys> <value bytes> <ops|-> <zipf|-> <ttl 0|1> <budget bytes>
  cell="$1"
  common=(--keys "$2" --value-bytes "$3")
  [ "$4" = - ] || common+=(--ops "$4")
  [ "$5" = - ] || common+=(--zipf "$5")
  [ "$6" = 0 ] || common+=(--ttl)
  flink_budget=(--budget-bytes "$7")
  rockstate_budget=(--budget "{\"total_bytes\":$7}")
}
set_states_cell() { # set_states_cell <name>: `--states`'s one cell, from the command line
  cell="$1"
  common=(--keys "$keys" --ops "$ops" --list-len "$list_len" --map-len "$map_len")
  [ "$ttl" = 0 ] || common+=(--ttl)
  [ -z "$only" ] || common+=(--only "$only")
  flink_budget=(--budget-bytes "$budget")
  rockstate_budget=(--budget "{\"total_bytes\":$budget}")
  flink_main=FlinkStates
  rockstate_cmd=(states)
}
flink() { # flink <line prefix> [FlinkOps / FlinkStates flags...]
  local prefix="$1"
  shift
  if ! java -Xmx2g -cp "$cache/classes:$cp_jars" "org.apache.flink.state.rocksdb.$flink_main" \
    "$@" "${common[@]}" "${flink_budget[@]}" 2>>"$log" >"$cache/flink-out.txt"; then
    echo "flink-bench: $flink_main failed; the end of $log:" >&2
    tail -20 "$log" >&2
    exit 1
  fi
  sed "s|^flink_phase=|cell=$cell ${prefix}_phase=|" "$cache/flink-out.txt" | tee -a "$out"
}
rockstate() {
  "$bench" "${rockstate_cmd[@]}" "${common[@]}" "${rockstate_budget[@]}" \
    | sed "s|^solo_phase=|cell=$cell solo_phase=|" | tee -a "$out"
}

cells=()
setter=set_cell # what turns an entry of cells into the cell being run
if [ "$states" = 1 ]; then
  cells+=(states)
  setter=set_states_cell
elif [ "$matrix" = 1 ]; then
  mib128=$((128 << 20))
  for size in fits beyond; do
    for dist in uniform zipf; do
      for vb in 100 1024; do
        for kind in plain ttl; do
          name="$size/$dist/${vb}B/$kind"
          case "$name" in *"$only"*) ;; *) continue ;; esac
          if [ "$size" = fits ]; then state=$((mib128 / 2)); else state=$((mib128 * 4)); fi
          z=-; [ "$dist" = uniform ] || z=0.99
          t=0; [ "$kind" = plain ] || t=1
          # As `rockstate-bench matrix` sizes a cell: keys = state / (value bytes + 16).
          cells+=("$name $((state / (vb + 16))) $vb 500000 $z $t $mib128")
        done
      done
    done
  done
  [ ${#cells[@]} -gt 0 ] || { echo "flink-bench: no cell matches --only $only" >&2; exit 2; }
else
  cells+=("single $keys $value_bytes $ops $zipf $ttl $budget")
fi

runs=(rockstate "flink flink" "flink flink_tuned --bloom --low-priority-compaction")
for r in $(seq 1 "$rounds"); do
  for c in "${cells[@]}"; do
    # shellcheck disable=SC2086 # the cell's fields are words by design
    $setter $c
    echo "flink-bench: round $r of $rounds, cell $cell" >&2
    run_rotated "$r"
  done
done

python3 - "$out" <<'EOF'
import re, statistics, sys
runs, cells = {}, []
for line in open(sys.argv[1]):
    m = re.match(r"cell=(\S+) (solo|flink|flink_tuned)_phase=(\S+) (?:rockstate|flink)_ops_s=(\d+)", line)
    if m:
        if m.group(1) not in cells:
            cells.append(m.group(1))
        runs.setdefault((m.group(1), m.group(2), m.group(3)), []).append(int(m.group(4)))
print("# medians over the rounds; vs_flink = rockstate / Flink defaults, "
      "vs_flink_tuned = rockstate / Flink with bloom filters and low-priority compaction")
# `bench ops`'s phases, then `bench states`'s; a cell has those of its mode (and with `--states
# --only`, the fills and the phases kept).
phases = ["insert", "update", "get", "get_missing", "read_modify_write",
          "list_fill", "list_append", "list_get", "list_update",
          "map_fill", "map_update", "map_get", "map_contains", "map_iterate", "map_is_empty",
          "map_remove"]
for cell in cells:
    for phase in phases:
        if (cell, "solo", phase) not in runs:
            continue
        ours = statistics.median(runs[(cell, "solo", phase)])
        flink = statistics.median(runs[(cell, "flink", phase)])
        tuned = statistics.median(runs[(cell, "flink_tuned", phase)])
        print(f"cell={cell} phase={phase} rockstate_ops_s={ours:.0f} flink_ops_s={flink:.0f} "
              f"flink_tuned_ops_s={tuned:.0f} vs_flink={ours / flink:.2f} "
              f"vs_flink_tuned={ours / tuned:.2f}")
EOF
