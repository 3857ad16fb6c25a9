//! The bucket of an `s3://<bucket>/<prefix>` URL is the one the storage uses, whatever the
//! environment (`AWS_BUCKET_NAME`, which `object_store` reads like every `AWS_*` variable) or
//! the options (`aws_bucket_name`) say: a variable left over from another tool must not send
//! a job's checkpoints, listings and sweeps to another bucket. (Its own test binary: it sets
//! an environment variable.)

#[path = "checkpoint_common/mod.rs"]
mod common;

use common::s3;
use rockstate::{CheckpointStorage, ObjectStorage};

#[test]
fn the_url_bucket_wins_over_the_environment_and_the_options() {
    let server = s3::server();
    let elsewhere = server.bucket_url("x");
    let other = s3::bucket_of(&elsewhere).to_string();
    std::env::set_var("AWS_BUCKET_NAME", &other);
    let url = server.bucket_url("job");
    let mut options = server.options();
    options.s3.push(("aws_bucket_name".into(), other.clone()));
    let s = ObjectStorage::open(&url, &options).unwrap();
    s.put_bytes("chk-1/b/_metadata", b"here").unwrap();
    assert_eq!(s.list("").unwrap().len(), 1);
    let body = server.get_raw(&format!("/{}?list-type=2", s3::bucket_of(&url)));
    assert!(body.contains("job/chk-1/b/_metadata"), "{body}");
    let other_body = server.get_raw(&format!("/{other}?list-type=2"));
    assert!(!other_body.contains("_metadata"), "{other_body}");
}
