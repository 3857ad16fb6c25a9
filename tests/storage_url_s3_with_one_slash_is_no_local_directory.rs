//! `open_storage` (used by `rockstate-bench --storage` and by embedders) takes any string
//! without `://` as a local directory and creates it. `s3:/bucket/prefix` or `s3:bucket/prefix`
//! (a missing slash) therefore silently becomes the relative directory `s3:/bucket/prefix`:
//! checkpoints (and benchmark numbers) land on local disk while the operator believes they are
//! in S3. A storage argument whose scheme is `s3:` must be an `InvalidStorageUrl`.

use rockstate::{open_storage, Error, ObjectStorageOptions};

#[test]
fn storage_url_s3_with_one_slash_is_no_local_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_current_dir(dir.path()).unwrap();
    let mut wrong = Vec::new();
    for url in ["s3:/bucket/prefix", "s3:bucket/prefix"] {
        match open_storage(url, &ObjectStorageOptions::default()) {
            Err(Error::InvalidStorageUrl { .. }) => {}
            other => wrong.push(format!("{url}: {other:?}")),
        }
    }
    let created: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        wrong.is_empty(),
        "{wrong:#?}\ncreated in the working directory: {created:?}"
    );
}
