//! Fuzzes the canonical savepoint decoder: open (footer, index, header) and read every block
//! and entry. Any input must give Ok or a typed error, never a panic or an unbounded
//! allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = sst_format::verify_savepoint(std::io::Cursor::new(data));
});
