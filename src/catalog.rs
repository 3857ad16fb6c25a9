//! What a checkpoint storage holds, read and classified without opening any backend: the
//! committed task checkpoints (decoded manifests), uncommitted checkpoint directories, shared
//! files with their reference counts, job records, and anything else. The operator commands
//! (`rockstate inspect | verify | gc`) are built on it:
//!
//! * [`verify`] reads every referenced file and checks size, CRC-32 and, for SSTs, the footer,
//!   properties and unique id against the manifest; it also checks every job record;
//! * [`gc_plan`] lists what garbage collection would delete, and [`gc_apply`] deletes it. A
//!   plan never contains a file that a committed manifest references, and is refused while any
//!   manifest cannot be decoded (its references are unknown).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, SystemTime};

use sst_format::{CheckpointManifest, JobCheckpoint};

use crate::checkpoint::layout;
use crate::checkpoint::registry::decode_manifest_named;
use crate::error::{Error, Result};
use crate::storage::{CheckpointStorage, ObjectInfo};

/// One committed task checkpoint.
#[derive(Debug, Clone)]
pub struct CommittedCheckpoint {
    /// Object name of its manifest.
    pub name: String,
    /// Size of the manifest object.
    pub manifest_bytes: u64,
    /// The decoded manifest.
    pub manifest: CheckpointManifest,
}

impl CommittedCheckpoint {
    /// Bytes of every file the checkpoint references (shared and private).
    pub fn state_bytes(&self) -> u64 {
        self.manifest
            .shared_files
            .iter()
            .map(|f| f.size)
            .sum::<u64>()
            + self
                .manifest
                .private_files
                .iter()
                .map(|f| f.size)
                .sum::<u64>()
    }
}

/// A checkpoint directory without `_metadata`: an attempt in flight, or garbage.
#[derive(Debug, Clone)]
pub struct UncommittedDir {
    /// Checkpoint id.
    pub id: u64,
    /// Backend id.
    pub backend_id: String,
    /// Its objects.
    pub objects: Vec<ObjectInfo>,
}

/// One shared object.
#[derive(Debug, Clone)]
pub struct SharedObject {
    /// The object.
    pub info: ObjectInfo,
    /// Number of committed manifests referencing it.
    pub references: usize,
}

/// One job record.
#[derive(Debug, Clone)]
pub struct JobRecordEntry {
    /// Object name.
    pub name: String,
    /// Checkpoint id.
    pub id: u64,
    /// The decoded record, or why it could not be decoded.
    pub record: std::result::Result<JobCheckpoint, String>,
}

/// Everything in a checkpoint storage, classified (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// Committed task checkpoints, by (id, backend id).
    pub checkpoints: Vec<CommittedCheckpoint>,
    /// `(manifest name, error)` for every manifest that could not be read or decoded.
    pub bad_manifests: Vec<(String, String)>,
    /// Checkpoint directories without a manifest.
    pub uncommitted: Vec<UncommittedDir>,
    /// Shared objects, by name.
    pub shared: Vec<SharedObject>,
    /// Job records, by id.
    pub job_records: Vec<JobRecordEntry>,
    /// Objects that fit no known name.
    pub other: Vec<ObjectInfo>,
}

impl Catalog {
    /// Lists and classifies every object of `storage`, decoding every manifest and job record.
    /// A listing failure is an error; a damaged manifest or record is recorded, not an error.
    pub fn load(storage: &dyn CheckpointStorage) -> Result<Catalog> {
        let mut objects = storage.list("")?;
        objects.sort_by(|a, b| a.name.cmp(&b.name));
        let mut cat = Catalog::default();
        let mut dirs: BTreeMap<(u64, String), Vec<ObjectInfo>> = BTreeMap::new();
        let mut shared = Vec::new();
        for o in objects {
            if layout::is_shared_name(&o.name) {
                shared.push(o);
            } else if let Some(id) = layout::parse_job_record_name(&o.name) {
                let record = storage
                    .get_bytes(&o.name)
                    .and_then(|b| sst_format::decode_job_checkpoint(&b).map_err(Error::from))
                    .map_err(|e| e.to_string());
                cat.job_records.push(JobRecordEntry {
                    name: o.name,
                    id,
                    record,
                });
            } else if let Some(p) = layout::parse_checkpoint_object(&o.name) {
                let key = (p.id, p.backend_id.to_string());
                dirs.entry(key).or_default().push(o);
            } else {
                cat.other.push(o);
            }
        }
        for ((id, backend_id), objs) in dirs {
            let meta = layout::metadata_name(id, &backend_id);
            let Some(m) = objs.iter().find(|o| o.name == meta) else {
                cat.uncommitted.push(UncommittedDir {
                    id,
                    backend_id,
                    objects: objs,
                });
                continue;
            };
            let decoded = storage
                .get_bytes(&meta)
                .and_then(|b| decode_manifest_named(&meta, &b));
            match decoded {
                Ok(manifest) => cat.checkpoints.push(CommittedCheckpoint {
                    name: meta,
                    manifest_bytes: m.size,
                    manifest,
                }),
                Err(e) => cat.bad_manifests.push((meta, e.to_string())),
            }
        }
        let mut refs: HashMap<&str, usize> = HashMap::new();
        for c in &cat.checkpoints {
            for f in &c.manifest.shared_files {
                *refs.entry(f.remote_name.as_str()).or_default() += 1;
            }
        }
        cat.shared = shared
            .into_iter()
            .map(|info| SharedObject {
                references: refs.get(info.name.as_str()).copied().unwrap_or(0),
                info,
            })
            .collect();
        cat.job_records.sort_by_key(|j| j.id);
        Ok(cat)
    }

    /// Every object name a committed manifest references.
    pub fn referenced(&self) -> HashSet<&str> {
        self.checkpoints
            .iter()
            .flat_map(|c| {
                c.manifest
                    .shared_files
                    .iter()
                    .map(|f| f.remote_name.as_str())
                    .chain(
                        c.manifest
                            .private_files
                            .iter()
                            .map(|f| f.remote_name.as_str()),
                    )
            })
            .collect()
    }
}

/// One problem [`verify`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The object at fault.
    pub file: String,
    /// What is wrong.
    pub detail: String,
}

/// What [`verify`] checked and found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verification {
    /// Manifests and job records read.
    pub records: usize,
    /// Distinct referenced files read and checked.
    pub files_checked: usize,
    /// Bytes read.
    pub bytes_checked: u64,
    /// Everything wrong, one entry per file and fault.
    pub problems: Vec<Problem>,
}

/// Reads every file a committed manifest references and checks its size and CRC-32 against
/// the manifest, and for shared SSTs the footer, block checksums, properties and unique id;
/// reports undecodable manifests and job records, and job records naming a manifest that is
/// not committed. `storage` must be the one `catalog` was loaded from.
pub fn verify(storage: &dyn CheckpointStorage, catalog: &Catalog) -> Result<Verification> {
    let scratch = tempfile::tempdir().map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let mut v = Verification {
        records: catalog.checkpoints.len() + catalog.job_records.len(),
        ..Verification::default()
    };
    let problem = |file: &str, detail: String| Problem {
        file: file.to_string(),
        detail,
    };
    for (name, e) in &catalog.bad_manifests {
        v.problems.push(problem(name, e.clone()));
    }
    let committed: HashSet<&str> = catalog
        .checkpoints
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    for j in &catalog.job_records {
        match &j.record {
            Err(e) => v.problems.push(problem(&j.name, e.clone())),
            Ok(r) => {
                for m in r.tasks.iter().filter_map(|t| t.manifest.as_deref()) {
                    if !committed.contains(m) {
                        v.problems.push(problem(
                            &j.name,
                            format!("names manifest {m}, which is not a committed checkpoint"),
                        ));
                    }
                }
            }
        }
    }
    let mut seen = HashSet::new();
    for c in &catalog.checkpoints {
        let files = c
            .manifest
            .shared_files
            .iter()
            .map(|f| (&f.remote_name, f.size, f.crc32, Some(&f.sst_id)))
            .chain(
                c.manifest
                    .private_files
                    .iter()
                    .map(|f| (&f.remote_name, f.size, f.crc32, None)),
            );
        for (remote, size, crc32, sst_id) in files {
            if !seen.insert(remote.as_str()) {
                continue;
            }
            v.files_checked += 1;
            let local = scratch.path().join(format!("f{}", v.files_checked));
            match storage.get_file(remote, &local) {
                Err(e) => v.problems.push(problem(remote, e.to_string())),
                Ok(d) => {
                    v.bytes_checked += d.size;
                    if d.size != size || d.crc32 != crc32 {
                        v.problems.push(problem(
                            remote,
                            format!(
                                "size {} crc32 {:08x}, but {} says {size} / {crc32:08x}",
                                d.size, d.crc32, c.name
                            ),
                        ));
                    } else if let Some(expected) = sst_id {
                        match sst_format::read_sst_meta(&local) {
                            Err(e) => v.problems.push(problem(remote, format!("SST: {e}"))),
                            Ok(meta) if &meta.unique_id != expected => v.problems.push(problem(
                                remote,
                                format!(
                                    "SST unique id {:?} differs from {:?} in {}",
                                    meta.unique_id, expected, c.name
                                ),
                            )),
                            Ok(_) => {}
                        }
                    }
                }
            }
            // Best effort: the scratch directory is removed at the end anyway.
            let _ = std::fs::remove_file(&local);
        }
    }
    Ok(v)
}

/// Why [`gc_plan`] would delete an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GcReason {
    /// A shared file no committed manifest references.
    UnreferencedShared,
    /// An object of a checkpoint directory that has no manifest.
    Uncommitted,
}

/// What garbage collection would delete.
#[derive(Debug, Clone, Default)]
pub struct GcPlan {
    /// Objects to delete, with why.
    pub delete: Vec<(ObjectInfo, GcReason)>,
    /// Garbage younger than the minimum age, kept (it may belong to a checkpoint in flight).
    pub too_young: Vec<ObjectInfo>,
}

impl GcPlan {
    /// Total bytes of the objects to delete.
    pub fn bytes(&self) -> u64 {
        self.delete.iter().map(|(o, _)| o.size).sum()
    }
}

/// Plans garbage collection: shared files no committed manifest references, and objects of
/// checkpoint directories without a manifest, each at least `min_age` old at `now` (younger
/// ones may belong to a checkpoint in flight). Refused with [`Error::CheckpointCorrupt`] while
/// any manifest cannot be decoded, since what it references is unknown.
pub fn gc_plan(catalog: &Catalog, min_age: Duration, now: SystemTime) -> Result<GcPlan> {
    if let Some((name, e)) = catalog.bad_manifests.first() {
        return Err(Error::CheckpointCorrupt {
            file: name.clone(),
            detail: format!("{e}; refusing to collect garbage while references are unknown"),
        });
    }
    let referenced = catalog.referenced();
    let old_enough = |o: &ObjectInfo| {
        now.duration_since(o.last_modified)
            .map(|age| age >= min_age)
            .unwrap_or(min_age.is_zero())
    };
    let mut plan = GcPlan::default();
    let candidates = catalog
        .shared
        .iter()
        .filter(|s| s.references == 0)
        .map(|s| (&s.info, GcReason::UnreferencedShared))
        .chain(
            catalog
                .uncommitted
                .iter()
                .flat_map(|d| d.objects.iter().map(|o| (o, GcReason::Uncommitted))),
        );
    for (o, why) in candidates {
        if referenced.contains(o.name.as_str()) {
            continue; // never: a committed manifest needs it
        }
        if old_enough(o) {
            plan.delete.push((o.clone(), why));
        } else {
            plan.too_young.push(o.clone());
        }
    }
    Ok(plan)
}

/// Deletes what `plan` lists, after reloading the catalog and dropping from the plan anything
/// that is referenced now or whose checkpoint directory got a manifest meanwhile. Returns the
/// objects deleted.
pub fn gc_apply(storage: &dyn CheckpointStorage, plan: &GcPlan) -> Result<Vec<ObjectInfo>> {
    let now = Catalog::load(storage)?;
    if let Some((name, e)) = now.bad_manifests.first() {
        return Err(Error::CheckpointCorrupt {
            file: name.clone(),
            detail: format!("{e}; refusing to collect garbage while references are unknown"),
        });
    }
    let referenced = now.referenced();
    let committed_dirs: HashSet<(u64, &str)> = now
        .checkpoints
        .iter()
        .map(|c| (c.manifest.checkpoint_id, c.manifest.backend_id.as_str()))
        .collect();
    let mut deleted = Vec::new();
    for (o, _) in &plan.delete {
        if referenced.contains(o.name.as_str()) {
            continue;
        }
        if let Some(p) = layout::parse_checkpoint_object(&o.name) {
            if committed_dirs.contains(&(p.id, p.backend_id)) {
                continue;
            }
        }
        storage.delete(&o.name)?;
        deleted.push(o.clone());
    }
    Ok(deleted)
}
