//! A process killed in the middle of a multipart upload leaves the upload's parts in the
//! bucket: no listing shows them, S3 bills them, nothing ever completes them. The storage's
//! sweep (`CheckpointStorage::sweep_incomplete`, run by a job owner's `sweep` and by
//! `rockstate gc --apply --min-age`) aborts the unfinished uploads under its root that the
//! checkpoint layout names once they are old enough, through a `ScopedStorage`'s namespace
//! too, and leaves every other upload: younger ones, another system's under the same root,
//! and those outside the root.
//!
//! Each upload is started and left unfinished through the `object_store` client itself
//! (moto on 127.0.0.1); whether the sweep aborted it is read back independently by trying to
//! complete it afterwards: S3 refuses to complete an aborted upload and completes a kept one.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::s3;
use object_store::{MultipartUpload, ObjectStore, ObjectStoreExt, PutPayload};
use rockstate::{CheckpointStorage, Clock, ObjectStorage, ScopedStorage, SystemClock};

/// Starts a multipart upload of `key` (the whole key, root included) with one part, and
/// returns it unfinished.
fn leave_unfinished(s: &ObjectStorage, key: &str) -> Box<dyn MultipartUpload> {
    let store: Arc<dyn ObjectStore> = s.store();
    let path = object_store::path::Path::parse(key).unwrap();
    s.run(async move {
        let mut upload = store.put_multipart(&path).await.unwrap();
        upload
            .put_part(PutPayload::from_static(b"a part of a file"))
            .await
            .unwrap();
        upload
    })
    .unwrap()
}

/// Whether `upload` can still be completed (it was not aborted).
fn completes(s: &ObjectStorage, mut upload: Box<dyn MultipartUpload>) -> bool {
    s.run(async move { upload.complete().await.is_ok() })
        .unwrap()
}

#[test]
fn sweep_aborts_old_unfinished_uploads_of_layout_names_under_its_root_only() {
    let s = s3::server().storage_with("root", s3::server().options());
    let backend = "0123456789abcdef0123456789abcdef";
    let own = [
        "root/shared/3-1700000000000-00000000000000aa.sst".to_string(),
        "root/shared/4-1700000000001-00000000000000bb.log".to_string(),
        format!("root/chk-3/{backend}/000012.sst"),
        // A job's namespace (`ScopedStorage::for_job`).
        "root/jobs/job-7/shared/5-1700000000002-00000000000000cc.sst".to_string(),
    ];
    let others = [
        // Another system's files under the same root: Flink's shared and private state.
        "root/shared/9f1c2b7e-3c44-4a8e-bd42-1f0e8f1f3a77",
        "root/chk-3/5f0d8a34-1b7e-4a7b-9e0c-2b1d3a4c5e6f",
        // A name of the layout outside the root.
        "elsewhere/shared/6-1700000000003-00000000000000dd.sst",
    ];
    let own_uploads: Vec<_> = own.iter().map(|k| leave_unfinished(&s, k)).collect();
    let other_uploads: Vec<_> = others.iter().map(|k| leave_unfinished(&s, k)).collect();
    // The listing shows none of them: they are invisible but for the sweep.
    assert!(s.list("").unwrap().is_empty());

    // Not old enough: with the clock at the epoch nothing has an age yet. (moto 5.2 reports
    // every upload as initiated on 2010-11-10, so a younger upload is made by the clock.)
    let hour = Duration::from_secs(3600);
    assert_eq!(s.sweep_incomplete(0, hour).unwrap(), 0);

    // Two hours from now every upload started in this test is old: the rockstate ones go,
    // through the namespace's sweep as through the storage's own.
    let later = SystemClock.now_ms() + 2 * 3_600_000;
    let scoped =
        ScopedStorage::for_job(Arc::clone(&s) as Arc<dyn CheckpointStorage>, "job-7").unwrap();
    assert_eq!(scoped.sweep_incomplete(later, hour).unwrap(), own.len());
    assert_eq!(
        s.sweep_incomplete(later, hour).unwrap(),
        0,
        "a second sweep"
    );

    for (key, upload) in own.iter().zip(own_uploads) {
        assert!(!completes(&s, upload), "{key} was not aborted");
    }
    for (key, upload) in others.iter().zip(other_uploads) {
        assert!(completes(&s, upload), "{key} was aborted");
    }
    // The completed ones are plain objects now, the others' own to keep.
    assert_eq!(s.list("shared/").unwrap().len(), 1);
}
