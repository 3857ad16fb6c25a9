//! `s3://<bucket>/<prefix>`: a bucket name S3 cannot have (a space, `?`, `#`) must be refused
//! when the storage is opened (`InvalidStorageUrl`). Today it is passed into the request URL
//! unescaped: `s3://data#x/job` lists and reads bucket `data` (the fragment is cut off),
//! `s3://data?list-type=2/job` lists `data` too while its puts fail, and `s3://my data/job`
//! panics in the storage runtime on every request. `rockstate inspect|verify|gc` then report on
//! a bucket the operator did not name.

#[path = "checkpoint_common/mod.rs"]
mod common;

use common::s3;
use rockstate::{open_storage, Error};

#[test]
fn s3_url_with_an_invalid_bucket_name_is_refused() {
    let server = s3::server();
    server.create_bucket("data");
    let data = open_storage("s3://data/job", &server.options()).unwrap();
    data.put_bytes("job/chk-1", b"record").unwrap();
    let mut wrong = Vec::new();
    for url in [
        "s3://data#x/job",
        "s3://data?list-type=2/job",
        "s3://my data/job",
    ] {
        match open_storage(url, &server.options()) {
            Err(Error::InvalidStorageUrl { .. }) => {}
            Err(e) => wrong.push(format!("{url}: opened with another error: {e}")),
            Ok(s) => {
                let listed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    s.list("")
                        .map(|v| v.into_iter().map(|o| o.name).collect::<Vec<_>>())
                }));
                wrong.push(format!("{url}: accepted; its listing: {listed:?}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
