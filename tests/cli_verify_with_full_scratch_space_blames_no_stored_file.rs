//! `rockstate verify` copies every referenced file into a scratch directory (the process's
//! temporary directory) to check it. When that local scratch space is full, nothing is known
//! about the stored files: verify must not report them as damaged ("problems found", exit 1,
//! `BAD <object>`) — it must fail as unable to read (exit 3) or check them another way. An
//! operator whose /tmp is full otherwise sees a healthy checkpoint storage reported damaged.

mod cli_fixture;
mod disk_common;

use std::process::Command;

use cli_fixture::{code, stderr, stdout, Fixture};

#[test]
fn verify_with_a_full_temporary_directory_calls_no_stored_file_bad() {
    let f = Fixture::new();
    let scratch = disk_common::SmallFs::mount(1);
    scratch.fill();
    let o = Command::new(env!("CARGO_BIN_EXE_rockstate"))
        .args(["verify", f.arg()])
        .env("TMPDIR", &scratch.root)
        .output()
        .unwrap();
    scratch.free();
    let out = stdout(&o);
    assert!(
        !out.contains("BAD "),
        "verify blamed stored objects for its own full scratch space (exit {}):\n{out}{}",
        code(&o),
        stderr(&o)
    );
    assert_ne!(code(&o), 1, "{out}{}", stderr(&o));
    // The storage is healthy: with scratch space, verify passes.
    let o = Command::new(env!("CARGO_BIN_EXE_rockstate"))
        .args(["verify", f.arg()])
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
}
