//! `ObjectStorage` against a real S3-compatible server (moto on 127.0.0.1, see
//! `checkpoint_common/s3.rs`): the storage contract (create-if-absent puts, digests, prefix
//! listing, idempotent deletes), multipart uploads, use from inside a tokio runtime, URL
//! handling, and a server that goes away.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::s3;
use futures::TryStreamExt;
use object_store::{ObjectStoreExt, PutPayload};
use rockstate::{
    open_storage, CheckpointStorage, Clock, Error, ObjectStorage, ObjectStorageOptions,
};

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1] ^ seed)
        .collect()
}

#[test]
fn s3_contract_and_conditional_put() {
    let s = s3::server().storage();
    let dir = tempfile::tempdir().unwrap();
    s.put_bytes("chk-1/b/_metadata", b"one").unwrap();
    // moto honours If-None-Match: other bytes under a taken name are refused.
    assert!(matches!(
        s.put_bytes("chk-1/b/_metadata", b"two"),
        Err(Error::ObjectExists { .. })
    ));
    assert_eq!(s.get_bytes("chk-1/b/_metadata").unwrap(), b"one");
    let local = dir.path().join("f");
    std::fs::write(&local, data(100_000, 1)).unwrap();
    let d = s.put_file("shared/x.sst", &local).unwrap();
    assert_eq!(d.size, 100_000);
    assert_eq!(d.crc32, crc32fast::hash(&data(100_000, 1)));
    let got = dir.path().join("g");
    assert_eq!(s.get_file("shared/x.sst", &got).unwrap(), d);
    assert_eq!(std::fs::read(&got).unwrap(), data(100_000, 1));
    let mut names: Vec<_> = s.list("").unwrap().into_iter().map(|o| o.name).collect();
    names.sort();
    assert_eq!(names, ["chk-1/b/_metadata", "shared/x.sst"]);
    assert_eq!(s.list("chk-").unwrap().len(), 1);
    assert_eq!(s.list("chk-1/b/").unwrap().len(), 1);
    assert_eq!(s.list("chk-2").unwrap().len(), 0);
    assert_eq!(s.list("shared/").unwrap()[0].size, 100_000);
    s.delete("shared/x.sst").unwrap();
    s.delete("shared/x.sst").unwrap();
    assert!(matches!(
        s.get_bytes("shared/x.sst"),
        Err(Error::ObjectNotFound { .. })
    ));
    assert!(matches!(
        s.get_file("shared/x.sst", &dir.path().join("h")),
        Err(Error::ObjectNotFound { .. })
    ));
    for bad in ["", "/a", "a//b", "../a"] {
        assert!(s.put_bytes(bad, b"").is_err(), "{bad}");
    }
}

#[test]
fn s3_multipart_upload_round_trips() {
    let server = s3::server();
    // S3's minimum part is 5 MiB: 11 MiB in 5 MiB parts is three parts.
    let options = ObjectStorageOptions {
        multipart_threshold: 6 << 20,
        part_size: 5 << 20,
        part_concurrency: 2,
        ..server.options()
    };
    let s = server.storage_with("mp", options);
    let dir = tempfile::tempdir().unwrap();
    let bytes = data(11 << 20, 7);
    let local = dir.path().join("big");
    std::fs::write(&local, &bytes).unwrap();
    let d = s.put_file("shared/big.sst", &local).unwrap();
    assert_eq!(
        (d.size, d.crc32),
        (bytes.len() as u64, crc32fast::hash(&bytes))
    );
    // The same bytes again count as stored (a retry after an ambiguous failure).
    assert_eq!(s.put_file("shared/big.sst", &local).unwrap(), d);
    let got = dir.path().join("got");
    assert_eq!(s.get_file("shared/big.sst", &got).unwrap(), d);
    assert!(std::fs::read(&got).unwrap() == bytes);
    assert_eq!(s.list("shared/").unwrap()[0].size, bytes.len() as u64);
}

/// Create-if-absent for multipart puts rests on the conditional completion alone (there is no
/// `HEAD` check): an existing object of the name, small or large, is never replaced, the put
/// is `ObjectExists`. A staging object (other stores' create-if-absent path) of a crashed put is
/// invisible to `list` and removed by `sweep_incomplete`.
#[test]
fn s3_multipart_put_never_overwrites() {
    let server = s3::server();
    let options = ObjectStorageOptions {
        multipart_threshold: 6 << 20,
        part_size: 5 << 20,
        ..server.options()
    };
    let s = server.storage_with("mp", options);
    let dir = tempfile::tempdir().unwrap();
    let big = data(11 << 20, 9);
    let local = dir.path().join("big");
    std::fs::write(&local, &big).unwrap();
    s.put_bytes("shared/small-first.sst", b"first").unwrap();
    let other = data(7 << 20, 3);
    let other_local = dir.path().join("other");
    std::fs::write(&other_local, &other).unwrap();
    s.put_file("shared/big-first.sst", &other_local).unwrap();
    for (name, before) in [
        ("shared/small-first.sst", b"first".to_vec()),
        ("shared/big-first.sst", other),
    ] {
        assert!(
            matches!(s.put_file(name, &local), Err(Error::ObjectExists { .. })),
            "{name}"
        );
        assert!(
            s.get_bytes(name).unwrap() == before,
            "{name} was overwritten"
        );
    }
    let store = s.store();
    let raw_list = |prefix: &str| -> Vec<String> {
        let path = s.object_path(prefix).unwrap();
        let store = store.clone();
        s.run(async move {
            store
                .list(Some(&path))
                .map_ok(|m| m.location.to_string())
                .try_collect::<Vec<_>>()
                .await
        })
        .unwrap()
        .unwrap()
    };
    // A leftover staging object (a put that crashed after its upload completed).
    let path = s.object_path(".uploads/0123").unwrap();
    let store2 = store.clone();
    s.run(async move { store2.put(&path, PutPayload::from_static(b"x")).await })
        .unwrap()
        .unwrap();
    assert!(s
        .list("")
        .unwrap()
        .iter()
        .all(|o| !o.name.starts_with(".uploads")));
    // Ages come from the caller's clock: younger than an hour now, older two hours later.
    let now = rockstate::SystemClock.now_ms();
    let hour = Duration::from_secs(3600);
    assert_eq!(s.sweep_incomplete(now, hour).unwrap(), 0);
    assert_eq!(raw_list(".uploads").len(), 1);
    assert_eq!(s.sweep_incomplete(now + 2 * 3_600_000, hour).unwrap(), 1);
    assert!(raw_list(".uploads").is_empty());
}

#[test]
fn s3_from_inside_a_tokio_runtime() {
    let s = s3::server().storage();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let task = rt.spawn(async move {
        s.put_bytes("a/b", b"inside").unwrap();
        let back = s.get_bytes("a/b").unwrap();
        drop(s);
        back
    });
    assert_eq!(rt.block_on(task).unwrap(), b"inside");
}

#[test]
fn s3_url_selects_the_storage() {
    let server = s3::server();
    server.create_bucket("urltest");
    let a = open_storage("s3://urltest/one/two", &server.options()).unwrap();
    let b = open_storage("s3://urltest/one", &server.options()).unwrap();
    a.put_bytes("x", b"1").unwrap();
    // The prefix is part of the name space: `one/two/x` is `two/x` under `one`.
    assert_eq!(b.get_bytes("two/x").unwrap(), b"1");
    assert_eq!(a.list("").unwrap().len(), 1);
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().join("l").display());
    open_storage(&url, &server.options())
        .unwrap()
        .put_bytes("y", b"2")
        .unwrap();
    assert_eq!(std::fs::read(dir.path().join("l/y")).unwrap(), b"2");
    let mem = open_storage("memory://", &ObjectStorageOptions::default()).unwrap();
    mem.put_bytes("z", b"3").unwrap();
    assert_eq!(mem.get_bytes("z").unwrap(), b"3");
    assert!(matches!(
        open_storage("file://relative", &server.options()),
        Err(Error::InvalidStorageUrl { .. })
    ));
}

#[test]
fn unreachable_server_is_a_transient_storage_error() {
    // A port nothing listens on: connection refused, retried, then reported.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let options = ObjectStorageOptions {
        retries: 1,
        request_retries: 1,
        initial_backoff: std::time::Duration::from_millis(1),
        s3: vec![
            ("aws_endpoint".into(), format!("http://127.0.0.1:{port}")),
            ("aws_access_key_id".into(), "k".into()),
            ("aws_secret_access_key".into(), "s".into()),
        ],
        ..ObjectStorageOptions::default()
    };
    let s: Arc<ObjectStorage> = Arc::new(ObjectStorage::open("s3://nobucket/p", &options).unwrap());
    let err = s.put_bytes("a", b"x").unwrap_err();
    assert!(
        matches!(
            err,
            Error::Storage {
                transient: true,
                ..
            }
        ),
        "{err}"
    );
    assert!(matches!(s.list(""), Err(Error::Storage { .. })));
}

/// A bucket that does not exist (a typo in the URL, a deleted bucket) is a permanent storage
/// error for puts, gets, listings, deletes and `exists`, never a missing object or a success
/// (a HEAD answers 404 without a body, so `exists` asks the bucket once).
#[test]
fn a_missing_bucket_is_no_missing_object() {
    let server = s3::server();
    let s = ObjectStorage::open("s3://no-such-bucket-rockstate/job", &server.options()).unwrap();
    let permanent = |r: &std::result::Result<(), Error>| {
        matches!(
            r,
            Err(Error::Storage {
                transient: false,
                ..
            })
        )
    };
    let put = s.put_bytes("job/chk-1", b"x");
    let get = s.get_bytes("job/chk-1").map(|_| ());
    let list = s.list("job/").map(|_| ());
    let delete = s.delete("job/chk-1");
    let exists = s.exists("job/chk-1").map(|_| ());
    assert!(
        permanent(&put)
            && permanent(&get)
            && permanent(&list)
            && permanent(&delete)
            && permanent(&exists),
        "put: {put:?}\nget: {get:?}\nlist: {list:?}\ndelete: {delete:?}\nexists: {exists:?}"
    );
    // In a bucket that exists, a missing object is `false`.
    let there = server.storage_with("exists-after-missing", server.options());
    assert!(!there.exists("job/chk-1").unwrap());
    there.put_bytes("job/chk-1", b"x").unwrap();
    assert!(there.exists("job/chk-1").unwrap());
}

/// A request the server refuses for good (HTTP 400: S3's EntityTooSmall for parts under
/// 5 MiB) is a permanent error, not a transient one callers would retry.
#[test]
fn a_client_error_is_permanent() {
    let server = s3::server();
    let options = ObjectStorageOptions {
        multipart_threshold: 1 << 20,
        part_size: 1 << 20,
        retries: 1,
        initial_backoff: Duration::from_millis(10),
        request_retries: 0,
        ..server.options()
    };
    let s = server.storage_with("client-error", options);
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("f");
    std::fs::write(&local, vec![7u8; 3 << 20]).unwrap();
    let r = s.put_file("shared/big.sst", &local);
    assert!(
        matches!(
            r,
            Err(Error::Storage {
                transient: false,
                ..
            })
        ),
        "{r:?}"
    );
}
