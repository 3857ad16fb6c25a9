//! A process killed (SIGKILL) in the middle of a multipart upload to S3 leaves the upload
//! unfinished: its parts stay in the bucket, billed, in no listing of objects. The next sweep
//! of the storage, in another process, aborts it.
//!
//! The child uploads a 100 MiB file in 5 MiB parts, again and again under fresh names of the
//! checkpoint layout; the parent kills it as soon as moto lists an unfinished upload, then
//! reads the bucket's unfinished uploads with plain HTTP requests before and after the sweep.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::process::spawn_child;
use common::s3;
use rockstate::{CheckpointStorage, Clock, ObjectStorage, ObjectStorageOptions, SystemClock};

const CHILD_ENV: &str = "ROCKSTATE_KILLED_UPLOAD_CHILD";

fn options(endpoint: &str) -> ObjectStorageOptions {
    ObjectStorageOptions {
        multipart_threshold: 5 << 20,
        part_size: 5 << 20,
        part_concurrency: 1,
        ..s3::options_for(endpoint)
    }
}

/// The unfinished uploads of `bucket` moto lists, by key.
fn unfinished(server: &s3::S3Server, bucket: &str) -> Vec<String> {
    let body = server.get_raw(&format!("/{bucket}?uploads"));
    body.split("<Key>")
        .skip(1)
        .filter_map(|s| s.split_once("</Key>").map(|(k, _)| k.to_string()))
        .collect()
}

#[test]
#[ignore = "child process"]
fn upload_child() {
    let spec = std::env::var(CHILD_ENV).unwrap();
    let mut parts = spec.split('|');
    let (endpoint, url, file) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    let s = ObjectStorage::open(url, &options(endpoint)).unwrap();
    for i in 1.. {
        let name = format!("shared/1-{i}-00000000000000ab.sst");
        s.put_file(&name, std::path::Path::new(file)).unwrap();
    }
}

#[test]
fn an_upload_of_a_killed_process_is_aborted_by_the_next_sweep() {
    let server = s3::server();
    let url = server.bucket_url("root");
    let bucket = s3::bucket_of(&url);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.sst");
    let bytes: Vec<u8> = (0..100u32 << 20)
        .map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes()[2])
        .collect();
    std::fs::write(&file, bytes).unwrap();
    let stderr = dir.path().join("child.stderr");
    let mut child = spawn_child(
        "upload_child",
        (
            CHILD_ENV,
            format!("{}|{url}|{}", server.endpoint, file.display()),
        ),
        "ROCKSTATE_UNUSED",
        None,
        &stderr,
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    while unfinished(server, bucket).is_empty() {
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!(
                "no upload seen: {}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let left = unfinished(server, bucket);
    assert!(!left.is_empty());
    assert!(
        left.iter().all(|k| k.starts_with("root/shared/1-")),
        "{left:?}"
    );

    let s = ObjectStorage::open(&url, &options(&server.endpoint)).unwrap();
    let hour = Duration::from_secs(3600);
    let later = SystemClock.now_ms() + 2 * 3_600_000;
    assert_eq!(s.sweep_incomplete(later, hour).unwrap(), left.len());
    assert_eq!(unfinished(server, bucket), Vec::<String>::new());
}
