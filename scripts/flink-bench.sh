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
# Each round runs rockstate, Flink with its defaults (no bloom filter), and Flink with
# `state.backend.rocksdb.use-bloom-filter: true`, 10 s apart, so load from elsewhere on a shared
# machine lands on all three alike. Not a test: nothing here asserts a speed.
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
cp_jars=$(ls "$cache"/pyflink/lib/*.jar | tr '\n' ':')
mkdir -p "$cache/classes"
javac -nowarn -cp "$cp_jars" -d "$cache/classes" benches/flink/FlinkOps.java

cargo build -q --release --bin rockstate

out="$cache/last-run.txt"
: > "$out"
for r in $(seq 1 "$rounds"); do
  echo "flink-bench: round $r of $rounds" >&2
  ./target/release/rockstate bench ops --solo-only --no-reference "${args[@]}" | tee -a "$out"
  sleep 10
  java -Xmx2g -cp "$cache/classes:$cp_jars" org.apache.flink.state.rocksdb.FlinkOps "${args[@]}" \
    2>/dev/null | tee -a "$out"
  sleep 10
  java -Xmx2g -cp "$cache/classes:$cp_jars" org.apache.flink.state.rocksdb.FlinkOps --bloom \
    "${args[@]}" 2>/dev/null | sed 's/^flink_phase=/flink_bloom_phase=/' | tee -a "$out"
  sleep 10
done

python3 - "$out" <<'EOF'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"(solo|flink|flink_bloom)_phase=(\S+) (?:rockstate|flink)_ops_s=(\d+)", line)
    if m:
        runs.setdefault((m.group(1), m.group(2)), []).append(int(m.group(3)))
print("# medians over the rounds; vs_flink = rockstate / Flink defaults, "
      "vs_flink_bloom = rockstate / Flink with bloom filters")
for phase in ["insert", "update", "get", "get_missing", "read_modify_write"]:
    ours = statistics.median(runs[("solo", phase)])
    flink = statistics.median(runs[("flink", phase)])
    bloom = statistics.median(runs[("flink_bloom", phase)])
    print(f"phase={phase} rockstate_ops_s={ours:.0f} flink_ops_s={flink:.0f} "
          f"flink_bloom_ops_s={bloom:.0f} vs_flink={ours / flink:.2f} "
          f"vs_flink_bloom={ours / bloom:.2f}")
EOF
