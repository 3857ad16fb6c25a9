//! The sweep's listing and aborting of unfinished multipart uploads against a server that
//! refuses them or is briefly unavailable. A bucket policy without
//! `s3:ListBucketMultipartUploads` or `s3:AbortMultipartUpload` answers 403: the sweep must
//! still succeed (the garbage collection around it must not depend on that permission) and
//! leave the upload. A 503 is retried, and the upload is then aborted.
//!
//! A proxy between the client and moto answers the chosen requests itself.

#[path = "checkpoint_common/mod.rs"]
mod common;
#[path = "s3_proxy/mod.rs"]
mod s3_proxy;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::s3;
use object_store::{MultipartUpload, ObjectStoreExt, PutPayload};
use rockstate::{CheckpointStorage, Clock, ObjectStorage, SystemClock};
use s3_proxy::{Action, Proxy, Request};

const DENIED: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>";
const SLOW_DOWN: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>ServiceUnavailable</Code><Message>Please reduce your request rate.</Message></Error>";

fn is_listing(r: &Request) -> bool {
    r.method == "GET" && r.target.contains("?uploads")
}

fn is_abort(r: &Request) -> bool {
    r.method == "DELETE" && r.target.contains("uploadId=")
}

#[test]
fn refused_listings_and_aborts_leave_the_upload_and_outages_are_retried() {
    let server = s3::server();
    let proxy = Proxy::start(&server.endpoint);
    let url = server.bucket_url("job");
    let s = ObjectStorage::open(&url, &proxy.options(server.options())).unwrap();
    let store = s.store();
    let path =
        object_store::path::Path::parse("job/shared/3-1700000000000-00000000000000aa.sst").unwrap();
    let mut upload: Box<dyn MultipartUpload> = s
        .run(async move {
            let mut upload = store.put_multipart(&path).await.unwrap();
            upload
                .put_part(PutPayload::from_static(b"part"))
                .await
                .unwrap();
            upload
        })
        .unwrap();
    let later = SystemClock.now_ms() + 2 * 3_600_000;
    let hour = Duration::from_secs(3600);

    proxy.set_rule(|r| {
        if is_listing(r) {
            Action::Answer(403, DENIED.to_string())
        } else {
            Action::Forward
        }
    });
    assert_eq!(
        s.sweep_incomplete(later, hour).unwrap(),
        0,
        "listing refused"
    );

    proxy.set_rule(|r| {
        if is_abort(r) {
            Action::Answer(403, DENIED.to_string())
        } else {
            Action::Forward
        }
    });
    assert_eq!(s.sweep_incomplete(later, hour).unwrap(), 0, "abort refused");

    // Two 503s on the listing and one on the abort: the retries go through.
    let outages = Arc::new(AtomicUsize::new(0));
    let o = Arc::clone(&outages);
    proxy.set_rule(move |r| {
        let n = o.load(Ordering::SeqCst);
        if (is_listing(r) && n < 2) || (is_abort(r) && n == 2) {
            o.fetch_add(1, Ordering::SeqCst);
            Action::Answer(503, SLOW_DOWN.to_string())
        } else {
            Action::Forward
        }
    });
    assert_eq!(s.sweep_incomplete(later, hour).unwrap(), 1);
    assert_eq!(outages.load(Ordering::SeqCst), 3);
    proxy.set_rule(|_| Action::Forward);
    let completed = s.run(async move { upload.complete().await }).unwrap();
    assert!(completed.is_err(), "the upload was not aborted");
}
