//! S3 answers a conditional `PutObject` (`If-None-Match: *`) with `409 Conflict`
//! (`ConditionalRequestConflict`) when a conflicting operation on the key is in progress; AWS
//! documents that such an upload "may be retried". It says nothing about the key being taken.
//! `ObjectStorage` must therefore retry (or at least report a transient error), never report
//! `ObjectExists` for a name that holds no object: the checkpoint code treats `ObjectExists` as
//! "somebody else's object" (it drops the name from the attempt's cleanup list and fails).
//!
//! A proxy between the client and moto answers the first PUT of the name with that 409 and
//! forwards everything else.

#[path = "checkpoint_common/mod.rs"]
mod common;
#[path = "s3_proxy/mod.rs"]
mod s3_proxy;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::s3;
use rockstate::{CheckpointStorage, Error, ObjectStorage};
use s3_proxy::{Action, Proxy};

const CONFLICT: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>ConditionalRequestConflict</Code><Message>A conflicting conditional operation is currently in progress against this resource. Please try again.</Message><RequestId>1</RequestId><HostId>1</HostId></Error>";

#[test]
fn s3_put_answered_409_conflict_is_retried_not_object_exists() {
    let server = s3::server();
    let proxy = Proxy::start(&server.endpoint);
    let url = server.bucket_url("job");
    let s = ObjectStorage::open(&url, &proxy.options(server.options())).unwrap();
    let puts = Arc::new(AtomicUsize::new(0));
    let p = Arc::clone(&puts);
    proxy.set_rule(move |r| {
        if r.method == "PUT"
            && r.target.ends_with("/chk-7/b/_metadata")
            && p.fetch_add(1, Ordering::SeqCst) == 0
        {
            Action::Answer(409, CONFLICT.to_string())
        } else {
            Action::Forward
        }
    });
    let r = s.put_bytes("chk-7/b/_metadata", b"manifest");
    let stored = s.exists("chk-7/b/_metadata").unwrap();
    assert!(
        !matches!(r, Err(Error::ObjectExists { .. })) || stored,
        "put reported ObjectExists for a name that holds no object (stored: {stored}): {r:?}"
    );
    r.unwrap();
    assert_eq!(s.get_bytes("chk-7/b/_metadata").unwrap(), b"manifest");
}
