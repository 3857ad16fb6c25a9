#!/usr/bin/env bash
# Installs what building and testing rockstate needs on a fresh Debian machine that has only the
# Rust toolchain: clang + libclang (librocksdb-sys runs bindgen and compiles RocksDB's C++),
# and rocksdict (PyPI) for the compatibility test.
# Idempotent: does nothing when everything is present.
set -euo pipefail

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

need=()
command -v clang >/dev/null 2>&1 || need+=(clang)
if ! ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 && ! ldconfig -p 2>/dev/null | grep -q 'libclang[-.0-9]*\.so'; then
  need+=(libclang-dev)
fi
command -v g++ >/dev/null 2>&1 || need+=(g++)

if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The compatibility test opens our databases with rocksdict, an independent RocksDB build.
if ! python3 -c "import rocksdict" >/dev/null 2>&1; then
  command -v python3 >/dev/null 2>&1 || { $SUDO apt-get update -qq; DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3 python3-pip >/dev/null; }
  echo "setup: installing rocksdict (PyPI)" >&2
  python3 -m pip install -q rocksdict 2>/dev/null || python3 -m pip install -q --break-system-packages rocksdict
fi

# The S3 tests (tests/storage_s3.rs, the s3:: variants of the checkpoint tests) start moto's
# S3 server on 127.0.0.1 themselves; they fail (never skip) without it.
if ! python3 -c "import moto.server, flask, werkzeug" >/dev/null 2>&1; then
  echo "setup: installing moto[server] (PyPI)" >&2
  python3 -m pip install -q 'moto[server]' 2>/dev/null || python3 -m pip install -q --break-system-packages 'moto[server]'
fi
