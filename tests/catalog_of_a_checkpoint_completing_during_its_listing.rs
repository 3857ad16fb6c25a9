//! A catalog loaded beside a running job: its listing walks the storage while a checkpoint
//! completes, passing the checkpoint's directory before the manifest is put and reaching the
//! job record after it is (manifests go before their records). The record then names a
//! manifest the listing lacks although storage holds it. The catalog reads that manifest:
//! `gc` neither refuses ("named by a retained job record, missing from storage", a false
//! alarm `rockstate gc` gave on a live job's storage) nor counts the checkpoint's shared files
//! as unreferenced garbage.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::hooked::Hooked;
use common::*;
use rockstate::catalog::{self, Catalog};
use rockstate::checkpoint::layout;
use rockstate::{CheckpointStorage, Clock, JobOwner, KeyedBackend, SystemClock};

#[test]
fn a_manifest_put_after_the_listing_passed_its_directory_is_read() {
    let fx = Fixture::new();
    let hooked = Hooked::new(fx.storage_dyn());
    let storage: Arc<dyn CheckpointStorage> = hooked.clone();
    let owner = Arc::new(JobOwner::open(storage.clone(), 2, Arc::new(SystemClock)).unwrap());
    let b = KeyedBackend::builder(fx.path("a"))
        .options(small_options())
        .checkpoint_storage(storage.clone())
        .job_owner(owner.clone())
        .open()
        .unwrap();
    let mut model = Model::new();
    let mut r = rng(3);
    random_writes(&b, &mut model, &mut r, 3000);
    checkpoint_completed_by(&owner, &b, 1);
    random_writes(&b, &mut model, &mut r, 3000);
    b.compact_state("v").unwrap();
    let s2 = checkpoint_completed_by(&owner, &b, 2);
    assert!(s2.files_uploaded > 0);

    // The listing passed checkpoint 2's directory before its manifest was there.
    hooked.unlist(layout::checkpoint_dir(2, b.backend_id()));
    let cat = Catalog::load(storage.as_ref()).unwrap();
    let meta = layout::metadata_name(2, b.backend_id());
    let late = cat
        .checkpoints
        .iter()
        .find(|c| c.name == meta)
        .expect("the manifest the record names was read");
    let plan = catalog::gc_plan(&cat, Duration::ZERO, SystemClock.now_ms())
        .unwrap_or_else(|e| panic!("gc refused a healthy live storage: {e}"));
    let shared: Vec<&str> = catalog::shared_objects(&late.manifest).collect();
    let deleted: Vec<&str> = plan
        .delete
        .iter()
        .map(|(o, _)| o.name.as_str())
        .filter(|n| shared.contains(n))
        .collect();
    assert!(
        deleted.is_empty(),
        "gc would delete files checkpoint 2 references: {deleted:?}"
    );
    drop(b);
    let restored = fx.restore("r", rockstate::RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model);
}
