//! The crash loop of `job_killed_in_a_loop_restores_its_last_completed_checkpoint.rs` on the
//! S3 test server behind a proxy that fails requests at random, as a busy or flaky object
//! store does: 4 % of all requests are answered `503 SlowDown` without reaching the server,
//! and 3 % of the writes (puts, part uploads, completions, deletes) reach the server and are
//! answered `500 InternalError` all the same, so the client cannot tell they were applied
//! (job records, manifests, SSTs, log segments, deletions of the garbage passes). Changelog
//! mode with local recovery, rescaling 1 -> 2 -> 1, killed at random moments as the other
//! loops are; after every kill storage verifies and stays bounded, and every restore equals
//! the model of the checkpoint it restored. (Its own test binary: the storage is chosen
//! through an environment variable the child processes inherit; the proxy runs in the
//! parent, so it outlives every child.)
mod crash_loop_common;
mod s3_proxy;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crash_loop_common::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use s3_proxy::{Action, Proxy};

const SLOW_DOWN: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
    <Error><Code>SlowDown</Code><Message>injected</Message></Error>";
const INTERNAL: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
    <Error><Code>InternalError</Code><Message>injected</Message></Error>";

#[test]
#[ignore = "child process"]
fn loop_child() {
    child_main();
}

#[test]
fn flaky_s3_rescale_changelog_local_recovery_on() {
    let server = crash_loop_common::common::s3::server();
    let proxy = Proxy::start(&server.endpoint);
    let mut r = SmallRng::seed_from_u64(soak_seed().wrapping_add(57));
    // Requests answered 503 unforwarded, and writes applied but answered 500.
    let (refused, lost) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (refused2, lost2) = (refused.clone(), lost.clone());
    proxy.set_rule(move |req| {
        let x: f64 = r.random();
        let write = req.method != "GET" && req.method != "HEAD";
        if x < 0.04 {
            refused2.fetch_add(1, Ordering::Relaxed);
            Action::Answer(503, SLOW_DOWN.to_string())
        } else if write && x < 0.07 {
            lost2.fetch_add(1, Ordering::Relaxed);
            Action::ForwardThenAnswer(500, INTERNAL.to_string())
        } else {
            Action::Forward
        }
    });
    s3_crash_loop(format!(
        "{} {}",
        proxy.endpoint,
        server.bucket_url("flaky-crash-loop")
    ));
    let (refused, lost) = (
        refused.load(Ordering::Relaxed),
        lost.load(Ordering::Relaxed),
    );
    println!("requests refused: {refused}, writes applied and answered an error: {lost}");
    assert!(refused > 0 && lost > 0, "the proxy injected nothing");
}
