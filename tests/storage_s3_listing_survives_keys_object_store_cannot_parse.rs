//! Another system writing into the same bucket prefix can store keys `object_store`'s `Path`
//! refuses: an empty segment (`root/shared/a//b`, what `aws s3 cp x s3://b/root//y` makes), a
//! `.` or `..` segment. `object_store` fails the whole listing on such a key, and a listing
//! that fails stops garbage collection, restores and `rockstate verify` alike. The storage
//! must list such a prefix anyway, with its own objects and every other object whose name is
//! valid, and leave out only the keys no name of ours can be.
//!
//! The odd keys are stored with plain HTTP requests to moto, past every client's checks.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::time::Duration;

use common::s3;
use rockstate::catalog::{gc_plan, Catalog};
use rockstate::{CheckpointStorage, Clock, ObjectStorage, SystemClock};

#[test]
fn a_prefix_holding_keys_object_store_refuses_still_lists() {
    let server = s3::server();
    let url = server.bucket_url("root");
    let bucket = s3::bucket_of(&url);
    let s = ObjectStorage::open(&url, &server.options()).unwrap();
    let own = "shared/7-1700000000000-0123456789abcdef.sst";
    s.put_bytes(own, b"an unreferenced file of ours").unwrap();
    s.put_bytes("chk-1/b/OPTIONS-000007", b"options of an attempt")
        .unwrap();
    // Keys of another system: refused by `object_store` (the first four), valid (the rest).
    for key in [
        "root/shared/a//b",
        "root/shared/./c",
        "root/shared/%2E%2E/d",
        "root//x",
        "root/shared/with%20space%2Bplus",
        "root/shared/%C3%BC.bin",
    ] {
        server.put_raw(bucket, key);
    }
    let names = |prefix: &str| -> Vec<String> {
        let mut n: Vec<_> = s
            .list(prefix)
            .unwrap_or_else(|e| panic!("list {prefix:?}: {e}"))
            .into_iter()
            .map(|o| o.name)
            .collect();
        n.sort();
        n
    };
    assert_eq!(
        names("shared/"),
        [own, "shared/with space+plus", "shared/ü.bin"]
    );
    assert_eq!(
        names(""),
        [
            "chk-1/b/OPTIONS-000007",
            own,
            "shared/with space+plus",
            "shared/ü.bin"
        ]
    );
    assert_eq!(names("shared/7-"), [own]);
    let listed = s.list("shared/7-").unwrap();
    assert_eq!(listed[0].size, 28);
    assert!(listed[0].last_modified > std::time::UNIX_EPOCH);

    // Past S3's page of 1,000 keys the listing goes on from the server's continuation token.
    for i in 0..1_000 {
        s.put_bytes(&format!("pages/{i:04}"), b"").unwrap();
    }
    server.put_raw(bucket, "root/pages//odd");
    let pages = names("pages/");
    assert_eq!(pages.len(), 1_000);
    assert_eq!(
        (pages[0].as_str(), pages[999].as_str()),
        ("pages/0000", "pages/0999")
    );

    // The catalog reads the storage, and garbage collection plans as without the odd keys:
    // our unreferenced file (old enough) goes, the other system's objects stay.
    let cat = Catalog::load(&s).unwrap();
    let later = SystemClock.now_ms() + 2 * 3_600_000;
    let plan = gc_plan(&cat, Duration::from_secs(3600), later).unwrap();
    let doomed: Vec<_> = plan.delete.iter().map(|(o, _)| o.name.as_str()).collect();
    assert!(doomed.contains(&own), "{doomed:?}");
    assert!(doomed
        .iter()
        .all(|n| !n.contains("with space") && !n.contains('ü')));
}
