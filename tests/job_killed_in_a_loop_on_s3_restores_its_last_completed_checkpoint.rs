//! The crash loop of `job_killed_in_a_loop_restores_its_last_completed_checkpoint.rs` on the
//! S3 test server, changelog mode with local recovery, rescaling 1 -> 2 -> 1 (its own test
//! binary: the storage is chosen through an environment variable the child processes
//! inherit).
mod crash_loop_common;
use crash_loop_common::*;

#[test]
#[ignore = "child process"]
fn loop_child() {
    child_main();
}

fn one_two_one(c: u64) -> u32 {
    [1, 1, 2, 2][(c % 4) as usize]
}

#[test]
fn s3_rescale_changelog_local_recovery_on() {
    let server = crash_loop_common::common::s3::server();
    let spec = format!("{} {}", server.endpoint, server.bucket_url("crash-loop"));
    std::env::set_var(S3_ENV, spec);
    crash_loop(
        "loop_child",
        Mode {
            changelog: true,
            local_recovery: true,
        },
        12,
        one_two_one,
        2500,
        200,
    );
}
