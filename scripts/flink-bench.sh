#!/usr/bin/env bash
# Runs `bench ops`'s workload through Flink 2.3's own RocksDB keyed state backend
# (benches/flink/FlinkOps.java) and through rockstate alone (`bench ops --solo-only`), in turns
# on this machine, and prints each phase's median ops/s per system and rockstate / Flink.
#
#   bash scripts/flink-bench.sh [--rounds R] [--keys N] [--value-bytes B]
#
# Flink comes from PyPI's apache-flink-libraries wheel (its flink-dist jar bundles the RocksDB
# state backend and FRocksDB's JNI library); the wheel and the compiled class are cached under
# target/flink-bench. Needs a JDK 17 (installed through apt when javac is missing) and python3.
# Each round runs rockstate, Flink with its defaults (no bloom filter, compactions at normal
# priority), and Flink tuned with what rockstate does by default and Flink can be configured to
# do (`state.backend.rocksdb.use-bloom-filter: true`, compaction pool at nice 19), 10 s apart,
# in an order that rotates from round to round, so load from elsewhere on a shared machine
# lands on all three alike. Not a test: nothing here asserts a speed.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --keys|--value-bytes) args+=("$1" "$2"); shift 2 ;;
    *) echo "flink-bench: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$rounds" -ge 1 ] || { echo "flink-bench: --rounds must be at least 1" >&2; exit 2; }

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
javac -nowarn -cp "$cp_jars" -d "$cache/classes" benches/flink/FlinkOps.java

cargo build -q --release --bin rockstate-bench

out="$cache/last-run.txt"
log="$cache/flink-stderr.log"
: > "$out"
: > "$log"
flink() { # flink <line prefix> [FlinkOps flags...]
  local prefix="$1"
  shift
  if ! java -Xmx2g -cp "$cache/classes:$cp_jars" org.apache.flink.state.rocksdb.FlinkOps \
    "$@" ${args[@]+"${args[@]}"} 2>>"$log" >"$cache/flink-out.txt"; then
    echo "flink-bench: FlinkOps failed; the end of $log:" >&2
    tail -20 "$log" >&2
    exit 1
  fi
  sed "s/^flink_phase=/${prefix}_phase=/" "$cache/flink-out.txt" | tee -a "$out"
}
rockstate() {
  ./target/release/rockstate-bench ops --solo-only --no-reference ${args[@]+"${args[@]}"} \
    | tee -a "$out"
}
runs=(rockstate "flink flink" "flink flink_tuned --bloom --low-priority-compaction")
for r in $(seq 1 "$rounds"); do
  echo "flink-bench: round $r of $rounds" >&2
  for i in 0 1 2; do
    ${runs[$(( (i + r - 1) % 3 ))]}
    sleep 10
  done
done

python3 - "$out" <<'EOF'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"(solo|flink|flink_tuned)_phase=(\S+) (?:rockstate|flink)_ops_s=(\d+)", line)
    if m:
        runs.setdefault((m.group(1), m.group(2)), []).append(int(m.group(3)))
print("# medians over the rounds; vs_flink = rockstate / Flink defaults, "
      "vs_flink_tuned = rockstate / Flink with bloom filters and low-priority compaction")
for phase in ["insert", "update", "get", "get_missing", "read_modify_write"]:
    ours = statistics.median(runs[("solo", phase)])
    flink = statistics.median(runs[("flink", phase)])
    tuned = statistics.median(runs[("flink_tuned", phase)])
    print(f"phase={phase} rockstate_ops_s={ours:.0f} flink_ops_s={flink:.0f} "
          f"flink_tuned_ops_s={tuned:.0f} vs_flink={ours / flink:.2f} "
          f"vs_flink_tuned={ours / tuned:.2f}")
EOF
