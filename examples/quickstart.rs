//! Embedding rockstate: keyed state, a checkpoint, and a restore (here at twice the
//! parallelism). Run: `cargo run --release --example quickstart`.

use std::sync::Arc;

use rockstate::{Error, KeyGroupRange, KeyedBackend, LocalStorage, RestoreFrom, Result};

fn main() -> Result<()> {
    let tmp = std::env::temp_dir();
    let dir = tempfile::tempdir().map_err(|source| Error::Io { path: tmp, source })?;
    let storage = Arc::new(LocalStorage::new(dir.path().join("checkpoints"))?);
    // One operator instance owning all 128 key groups counts clicks per user.
    let backend = KeyedBackend::builder(dir.path().join("task"))
        .max_parallelism(128)
        .checkpoint_storage(storage.clone())
        .open()?;
    let clicks = backend.value_state::<String, (), u64>("clicks")?;
    for i in 0..10_000 {
        let user = format!("user-{}", i % 1_000);
        let n = clicks.get(&user, &())?.unwrap_or(0);
        clicks.put(&user, &(), &(n + 1))?;
    }
    let stats = backend.checkpoint(1)?; // snapshot, then upload of the new SST files
    backend.notify_checkpoint_complete(1)?;
    println!("checkpoint 1: {} bytes uploaded", stats.bytes_uploaded);
    backend.close()?; // `clicks` now answers ErrorKind::Closed

    // Restore at parallelism 2: each instance restores the key groups it owns.
    let mut total = 0;
    for index in 0..2 {
        let restored = KeyedBackend::builder(dir.path().join(format!("restored-{index}")))
            .max_parallelism(128)
            .key_groups(KeyGroupRange::for_operator(128, 2, index)?)
            .checkpoint_storage(storage.clone())
            .restore(RestoreFrom::Checkpoint(1))?;
        let clicks = restored.value_state::<String, (), u64>("clicks")?;
        for u in 0..1_000 {
            match clicks.get(&format!("user-{u}"), &()) {
                Ok(Some(n)) => total += n,
                Ok(None) | Err(Error::KeyGroupOutOfRange { .. }) => {} // the other instance's
                Err(e) => return Err(e),
            }
        }
    }
    assert_eq!(total, 10_000, "every click restored exactly once");
    println!("restored at parallelism 2: {total} clicks; quickstart: OK");
    Ok(())
}
