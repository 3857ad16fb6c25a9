//! Mutates a small real checkpoint directory and restores it: the result must be a typed
//! error or exactly the state of a completed checkpoint. See `harness.rs`.
#![no_main]

// The replay test uses more of the harness than the fuzz target does.
#[allow(dead_code)]
#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::run(data);
});
