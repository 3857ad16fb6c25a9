//! Restore (design.md §7) of one checkpoint into an empty directory: pick the manifest, check
//! it against what the builder asks for, download every file in parallel, verify each one
//! (size, CRC-32, and for SSTs the footer, properties and unique id) and only then open
//! RocksDB. Any mismatch is a typed error naming the file; nothing is opened from unverified
//! bytes, and a failed restore removes what it downloaded.
//!
//! This module owns selection, verification and download. For issue 4 the checkpoint's
//! key-group range must equal the target's; rescaling (clip with `delete_range`, merge several
//! handles) will plug in after [`select`] and [`download_with`], which already work per manifest.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use sst_format::{CheckpointManifest, SstUniqueId};

use crate::backend::{BackendBuilder, KeyedBackend};
use crate::checkpoint::layout;
use crate::checkpoint::local_recovery::{LocalSource, RestoreReport};
use crate::checkpoint::registry::{decode_manifest_named, list_committed, RestoredBase};
use crate::checkpoint::uploader::run_parallel;
use crate::checkpoint::{to_manifest_state, RestoreFrom};
use crate::error::{Error, Result};
use crate::keygroup::{self, KeyGroupRange};
use crate::storage::{validate_object_name, CheckpointStorage};

/// Restores per `from` and opens the backend `builder` describes.
pub(crate) fn restore(builder: BackendBuilder, from: RestoreFrom) -> Result<KeyedBackend> {
    restore_with_report(builder, from).map(|(backend, _)| backend)
}

/// [`restore`], reporting where the files came from.
pub(crate) fn restore_with_report(
    builder: BackendBuilder,
    from: RestoreFrom,
) -> Result<(KeyedBackend, RestoreReport)> {
    let p = builder.restore_params();
    let storage = p.storage.clone().ok_or(Error::NoCheckpointStorage)?;
    keygroup::validate_max_parallelism(p.max_parallelism)?;
    let key_groups = match p.key_groups {
        Some(r) => r,
        None => KeyGroupRange::all(p.max_parallelism)?,
    };
    let (metadata_name, manifest) = select(storage.as_ref(), &from, key_groups, p.max_parallelism)?;
    validate_manifest(&metadata_name, &manifest)?;

    let target = p.path.clone();
    let existed = target.exists();
    if existed {
        let mut entries = std::fs::read_dir(&target).map_err(|e| Error::io(&target, e))?;
        if entries.next().is_some() {
            return Err(Error::RestoreTargetNotEmpty(target));
        }
    } else {
        std::fs::create_dir_all(&target).map_err(|e| Error::io(&target, e))?;
    }
    let manifest = Arc::new(manifest);
    let staging_root = p
        .staging_dir
        .clone()
        .unwrap_or_else(|| layout::default_staging_root(&target));
    let local = p
        .local_recovery
        .then(|| LocalSource::find(&staging_root, &manifest.backend_id, manifest.checkpoint_id))
        .flatten();
    let mut report = RestoreReport {
        checkpoint: metadata_name.clone(),
        ..RestoreReport::default()
    };
    let result = download_with(
        storage.as_ref(),
        &manifest,
        &target,
        p.transfer_threads,
        local.as_ref(),
    )
    .map(|counts| {
        (report.files_local, report.bytes_local) = counts.local;
        (report.files_downloaded, report.bytes_downloaded) = counts.downloaded;
    })
    .and_then(|()| {
        builder.open_inner(Some(RestoredBase {
            metadata_name: metadata_name.clone(),
            manifest: Arc::clone(&manifest),
        }))
    })
    .and_then(|backend| {
        let mut have: Vec<_> = backend.states()?.iter().map(to_manifest_state).collect();
        let mut want = manifest.states.clone();
        have.sort_by(|a, b| a.name.cmp(&b.name));
        want.sort_by(|a, b| a.name.cmp(&b.name));
        if have != want {
            return Err(Error::CheckpointCorrupt {
                file: metadata_name.clone(),
                detail: "the manifest's state list differs from the restored database's".into(),
            });
        }
        Ok(backend)
    });
    if result.is_err() {
        // Best effort: leave the target as it was (empty or missing).
        if existed {
            if let Ok(entries) = std::fs::read_dir(&target) {
                for e in entries.flatten() {
                    let _ = std::fs::remove_file(e.path())
                        .or_else(|_| std::fs::remove_dir_all(e.path()));
                }
            }
        } else {
            let _ = std::fs::remove_dir_all(&target);
        }
    }
    let backend = result?;
    if let Some(local) = &local {
        local.retire_backend();
    }
    Ok((backend, report))
}

fn matches_range(m: &CheckpointManifest, key_groups: KeyGroupRange, max_parallelism: u32) -> bool {
    m.key_group_start == key_groups.start
        && m.key_group_end == key_groups.end
        && m.max_parallelism == max_parallelism
}

/// Loads the manifest `name`, checking that it describes the checkpoint its name says.
fn load(
    storage: &dyn CheckpointStorage,
    name: &str,
    id: u64,
    backend: &str,
) -> Result<CheckpointManifest> {
    let bytes = storage.get_bytes(name)?;
    let m = decode_manifest_named(name, &bytes)?;
    if m.checkpoint_id != id || m.backend_id != backend {
        return Err(Error::CheckpointCorrupt {
            file: name.to_string(),
            detail: format!(
                "manifest describes checkpoint {} of backend {}",
                m.checkpoint_id, m.backend_id
            ),
        });
    }
    Ok(m)
}

/// Picks the manifest to restore; see [`RestoreFrom`].
pub(crate) fn select(
    storage: &dyn CheckpointStorage,
    from: &RestoreFrom,
    key_groups: KeyGroupRange,
    max_parallelism: u32,
) -> Result<(String, CheckpointManifest)> {
    let committed = list_committed(storage)?;
    let wanted = |m: &CheckpointManifest| matches_range(m, key_groups, max_parallelism);
    let describe = format!("key groups {key_groups} of max parallelism {max_parallelism}");
    if let RestoreFrom::Exact {
        checkpoint_id,
        backend_id,
    } = from
    {
        let name = layout::metadata_name(*checkpoint_id, backend_id);
        if !committed.iter().any(|(n, _, _)| *n == name) {
            return Err(Error::CheckpointNotFound(format!(
                "checkpoint {checkpoint_id} of backend {backend_id}"
            )));
        }
        let m = load(storage, &name, *checkpoint_id, backend_id)?;
        if !wanted(&m) {
            return Err(Error::RestoreMismatch {
                checkpoint: name,
                existing: format!(
                    "key groups [{}, {}] of max parallelism {}",
                    m.key_group_start, m.key_group_end, m.max_parallelism
                ),
                requested: describe,
            });
        }
        return Ok((name, m));
    }
    let mut ids: Vec<u64> = committed.iter().map(|(_, id, _)| *id).collect();
    ids.dedup();
    ids.reverse();
    if let RestoreFrom::Checkpoint(id) = from {
        ids.retain(|i| i == id);
    }
    for id in ids {
        let mut found = Vec::new();
        for (name, _, backend) in committed.iter().filter(|(_, i, _)| *i == id) {
            let m = load(storage, name, id, backend)?;
            if wanted(&m) {
                found.push((name.clone(), m));
            }
        }
        match found.len() {
            0 => continue,
            1 => return found.pop().ok_or(Error::CheckpointNotFound(describe)),
            _ => {
                return Err(Error::AmbiguousCheckpoint {
                    checkpoint_id: id,
                    candidates: found.into_iter().map(|(_, m)| m.backend_id).collect(),
                })
            }
        }
    }
    Err(Error::CheckpointNotFound(match from {
        RestoreFrom::Checkpoint(id) => format!("checkpoint {id} for {describe}"),
        _ => format!("any checkpoint for {describe}"),
    }))
}

/// Structural checks of a manifest before anything is downloaded: names are safe and unique,
/// and the RocksDB files needed to open are present.
pub(crate) fn validate_manifest(name: &str, m: &CheckpointManifest) -> Result<()> {
    let bad = |detail: String| Error::CheckpointCorrupt {
        file: name.to_string(),
        detail,
    };
    let mut locals = HashSet::new();
    for f in &m.shared_files {
        if !layout::is_shared_name(&f.remote_name) || validate_object_name(&f.remote_name).is_err()
        {
            return Err(bad(format!("bad shared object name `{}`", f.remote_name)));
        }
        if !layout::valid_local_name(&f.local_name) || !f.local_name.ends_with(".sst") {
            return Err(bad(format!("bad SST file name `{}`", f.local_name)));
        }
        if !locals.insert(f.local_name.as_str()) {
            return Err(bad(format!("file `{}` listed twice", f.local_name)));
        }
    }
    for f in &m.private_files {
        if validate_object_name(&f.remote_name).is_err() || layout::is_shared_name(&f.remote_name) {
            return Err(bad(format!("bad private object name `{}`", f.remote_name)));
        }
        if !layout::valid_local_name(&f.local_name) || f.local_name.ends_with(".sst") {
            return Err(bad(format!("bad private file name `{}`", f.local_name)));
        }
        if !locals.insert(f.local_name.as_str()) {
            return Err(bad(format!("file `{}` listed twice", f.local_name)));
        }
    }
    if !locals.contains("CURRENT") || !locals.iter().any(|n| n.starts_with("MANIFEST-")) {
        return Err(bad(
            "no CURRENT or MANIFEST file: not a RocksDB checkpoint".into()
        ));
    }
    Ok(())
}

/// One file to fetch.
struct Fetch<'a> {
    remote: &'a str,
    local: &'a str,
    size: u64,
    crc32: u32,
    sst_id: Option<&'a SstUniqueId>,
}

/// `(files, bytes)` taken from the local copy and downloaded by [`download_with`].
#[derive(Debug, Default)]
pub(crate) struct FetchCounts {
    pub(crate) local: (usize, u64),
    pub(crate) downloaded: (usize, u64),
}

/// Downloads and verifies every file of `m` into `target`, in parallel, taking verified files
/// from the local copy `local` first (local recovery).
pub(crate) fn download_with(
    storage: &dyn CheckpointStorage,
    m: &CheckpointManifest,
    target: &Path,
    threads: usize,
    local: Option<&LocalSource>,
) -> Result<FetchCounts> {
    let mut jobs: Vec<Fetch<'_>> = m
        .shared_files
        .iter()
        .map(|f| Fetch {
            remote: &f.remote_name,
            local: &f.local_name,
            size: f.size,
            crc32: f.crc32,
            sst_id: Some(&f.sst_id),
        })
        .chain(m.private_files.iter().map(|f| Fetch {
            remote: &f.remote_name,
            local: &f.local_name,
            size: f.size,
            crc32: f.crc32,
            sst_id: None,
        }))
        .collect();
    jobs.sort_by_key(|j| std::cmp::Reverse(j.size));
    let local_source = local;
    let from_local = run_parallel(&jobs, threads, |job| {
        let corrupt = |detail: String| Error::CheckpointCorrupt {
            file: job.remote.to_string(),
            detail,
        };
        let local = target.join(job.local);
        if let Some(source) = local_source {
            if source.fetch(job.local, job.size, job.crc32, job.sst_id, &local)? {
                return Ok(true);
            }
        }
        let digest = match storage.get_file(job.remote, &local) {
            Ok(d) => d,
            Err(Error::ObjectNotFound { .. }) => {
                return Err(corrupt("missing from storage".into()))
            }
            Err(e) => return Err(e),
        };
        if digest.size != job.size {
            return Err(corrupt(format!(
                "{} bytes, manifest says {}",
                digest.size, job.size
            )));
        }
        if digest.crc32 != job.crc32 {
            return Err(corrupt(format!(
                "crc32 {:08x}, manifest says {:08x}",
                digest.crc32, job.crc32
            )));
        }
        if let Some(id) = job.sst_id {
            let meta = sst_format::read_sst_meta(&local)
                .map_err(|e| corrupt(format!("not a valid SST: {e}")))?;
            if meta.unique_id != *id {
                return Err(corrupt(format!(
                    "SST unique id {}, manifest says {id}",
                    meta.unique_id
                )));
            }
        }
        Ok(false)
    })?;
    let mut counts = FetchCounts::default();
    for (job, from_local) in jobs.iter().zip(from_local) {
        let c = if from_local {
            &mut counts.local
        } else {
            &mut counts.downloaded
        };
        c.0 += 1;
        c.1 += job.size;
    }
    Ok(counts)
}
