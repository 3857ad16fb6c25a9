"""Opens a rockstate database read-only with rocksdict (an independent RocksDB build, Python
binding) and prints `<column family> <entry count>` per column family. Used by
tests/compat_rocksdict.rs to prove that databases written with the default SST format_version
open in other RocksDB tools."""
import sys

from rocksdict import AccessType, Options, Rdict

path = sys.argv[1]
opts = Options(raw_mode=True)
names = Rdict.list_cf(path, opts)
db = Rdict(path, options=opts, column_families={n: Options(raw_mode=True) for n in names},
           access_type=AccessType.read_only())
for name in sorted(names):
    cf = db.get_column_family(name)
    count = sum(1 for _ in cf.keys())
    print(f"{name} {count}")
db.close()
