//! `notify_checkpoint_aborted` for a checkpoint whose upload is still running (on another
//! thread): the upload stops and cleans up itself and returns `CheckpointAborted`; nothing it
//! put stays in storage (docs/ownership.md §1: the task deletes its own aborted attempts),
//! whatever object it was putting when the abort came, and no local copy stays.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::sync::Arc;

use common::hooked::Hooked;
use common::*;
use rockstate::checkpoint::layout;
use rockstate::{CheckpointOptions, CheckpointStorage, ErrorKind, KeyedBackend};

#[test]
fn an_abort_during_any_put_of_an_upload_leaves_nothing_of_it() {
    for which in ["first shared", "private", "manifest"] {
        let fx = Fixture::new();
        let hooked = Hooked::new(fx.storage_dyn());
        let storage: Arc<dyn CheckpointStorage> = hooked.clone();
        let b = Arc::new(
            KeyedBackend::builder(fx.path("a"))
                .options(small_options())
                .checkpoint_storage(storage.clone())
                .checkpoint_options(CheckpointOptions {
                    transfer_threads: 1,
                    ..Default::default()
                })
                .open()
                .unwrap(),
        );
        let mut model = Model::new();
        let mut r = rng(7);
        random_writes(&b, &mut model, &mut r, 3000);
        b.checkpoint(1).unwrap();
        b.notify_checkpoint_complete(1).unwrap();
        let before = fx.objects();
        random_writes(&b, &mut model, &mut r, 3000);
        b.compact_state("v").unwrap();
        let p = b.snapshot(2).unwrap();
        let target = match which {
            "manifest" => layout::metadata_name(2, b.backend_id()),
            "private" => layout::private_name(2, b.backend_id(), "CURRENT"),
            _ => String::new(),
        };
        // "first shared": any name, the first put whatever it is.
        let on = if which == "first shared" {
            "*".to_string()
        } else {
            target.clone()
        };
        let b2 = b.clone();
        hooked.before_put(on, move || b2.notify_checkpoint_aborted(2).unwrap());
        let up = p.upload();
        let after = fx.objects();
        let left: Vec<&String> = after.keys().filter(|k| !before.contains_key(*k)).collect();
        let local = layout::local_copy_dir(
            &layout::default_staging_root(&fx.path("a")),
            b.backend_id(),
            2,
        );
        assert!(
            matches!(&up, Err(e) if e.kind() == ErrorKind::Conflict || matches!(e, rockstate::Error::CheckpointAborted { .. }))
                && left.is_empty()
                && !local.exists(),
            "abort during the {which} put: upload {up:?}; left in storage {left:?}; local copy {}",
            local.exists()
        );
        // The backend goes on.
        b.checkpoint(3).unwrap();
        b.notify_checkpoint_complete(3).unwrap();
        assert_verified(fx.storage.as_ref());
    }
}
