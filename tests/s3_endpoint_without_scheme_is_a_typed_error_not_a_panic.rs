//! An S3 endpoint configured without its scheme (`AWS_ENDPOINT_URL=127.0.0.1:9000`, a common
//! slip) must give a typed, clear error — `InvalidStorageUrl` naming the endpoint, at open or
//! at the first request — never a panic inside the storage's runtime reported as "the storage
//! runtime stopped" (operation `run`, no object named). `rockstate verify s3://b/p` with such an
//! endpoint prints a panic backtrace, then `error: checkpoint storage run of `` failed: the
//! storage runtime stopped`.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::sync::Mutex;

use common::s3;
use rockstate::{CheckpointStorage, Error, ObjectStorage};

static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

#[test]
fn s3_endpoint_without_scheme_is_a_typed_error_not_a_panic() {
    let server = s3::server();
    let url = server.bucket_url("job");
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.lock().unwrap().push(info.to_string());
        default_hook(info);
    }));
    let mut options = server.options();
    for kv in options.s3.iter_mut() {
        if kv.0 == "aws_endpoint" {
            // "127.0.0.1:<port>": the same server, without `http://`.
            kv.1 = kv.1.trim_start_matches("http://").to_string();
        }
    }
    let result = ObjectStorage::open(&url, &options).and_then(|s| s.list("").map(|_| ()));
    let panics = PANICS.lock().unwrap().clone();
    assert!(
        panics.is_empty(),
        "a storage thread panicked: {panics:?}; the caller got {result:?}"
    );
    assert!(
        matches!(result, Err(Error::InvalidStorageUrl { .. })),
        "{result:?}"
    );
}
