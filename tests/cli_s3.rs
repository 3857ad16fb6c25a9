//! The demo and the operator commands on S3 storage (`--storage s3://…`, `verify s3://…`),
//! against the moto server the test starts; endpoint and credentials reach the binary through
//! the standard `AWS_*` environment variables.

// The shared server helper also serves tests that use more of it.
#[allow(dead_code)]
#[path = "checkpoint_common/s3.rs"]
mod s3;

use std::process::{Command, Output};

fn rockstate(server: &s3::S3Server, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rockstate"))
        .args(args)
        .env("AWS_ENDPOINT_URL", &server.endpoint)
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ALLOW_HTTP", "true")
        .output()
        .expect("run rockstate")
}

#[test]
fn demo_on_s3_passes_and_its_storage_verifies() {
    let server = s3::server();
    server.create_bucket("demo");
    let args = [
        "demo",
        "--impressions",
        "6000",
        "--users",
        "100",
        "--ads",
        "5",
        "--checkpoint-every",
        "1000",
        "--crash-at",
        "3500",
        "--storage",
        "s3://demo/job",
    ];
    let o = rockstate(server, &args);
    let out = String::from_utf8_lossy(&o.stdout);
    let last = out.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("verdict: PASS") && last.contains("restores 1"),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(0));
    let err = String::from_utf8_lossy(&o.stderr);
    let start = err.find("jobs/").expect("the demo names its job namespace");
    let job = err[start..]
        .split(['/', ':', ' ', '\n'])
        .nth(1)
        .unwrap()
        .to_string();
    let v = rockstate(server, &["verify", &format!("s3://demo/job/jobs/{job}")]);
    assert_eq!(
        v.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&v.stdout),
        String::from_utf8_lossy(&v.stderr)
    );
    // A second run on the same storage is a job of its own: it neither hangs on nor
    // restores the first run's checkpoints.
    let again = rockstate(server, &args);
    let out = String::from_utf8_lossy(&again.stdout);
    assert!(
        out.lines()
            .last()
            .unwrap_or_default()
            .starts_with("verdict: PASS"),
        "{out}\n{}",
        String::from_utf8_lossy(&again.stderr)
    );
}
