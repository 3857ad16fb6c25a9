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

#[test]
fn s3_rescale_changelog_local_recovery_on() {
    let server = crash_loop_common::common::s3::server();
    s3_crash_loop(format!(
        "{} {}",
        server.endpoint,
        server.bucket_url("crash-loop")
    ));
}
