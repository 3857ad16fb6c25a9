//! What a checkpoint storage holds, read and classified without opening any backend: the
//! committed task checkpoints (decoded manifests), uncommitted checkpoint directories, shared
//! files with their reference counts, job records, the void records of abandoned checkpoints
//! (`docs/job-record-format.md` §5), and anything else. The operator commands
//! (`rockstate inspect | verify | gc`) are built on it:
//!
//! * [`verify`] reads every referenced file and checks size, CRC-32 and, for SSTs, the footer,
//!   properties and unique id against the manifest; it also checks every job record;
//! * [`classify`] is the one garbage classification of the crate: the job's checkpoint owner
//!   (`checkpoint::JobOwner`) runs it after every completion and in its sweep, and
//!   `rockstate gc` through [`gc_plan`]; [`gc_apply`] deletes a plan in a crash-safe order.
//!   Its rules are in `docs/ownership.md` §4. A plan never contains an object that a retained
//!   or possibly pending checkpoint needs, and is refused while such a manifest or any job
//!   record cannot be decoded (its references are unknown).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use sst_format::{CheckpointManifest, JobCheckpoint, JobRecord, LogSegmentFile, SstUniqueId};

use crate::clock::millis_since_epoch;
use crate::error::{Error, ErrorKind, Result};
use crate::layout;
use crate::storage::{CheckpointStorage, ObjectDigest, ObjectInfo};

/// One committed task checkpoint.
#[derive(Debug, Clone)]
pub struct CommittedCheckpoint {
    /// Object name of its manifest.
    pub name: String,
    /// Size of the manifest object.
    pub manifest_bytes: u64,
    /// The decoded manifest.
    pub manifest: Arc<CheckpointManifest>,
}

impl CommittedCheckpoint {
    /// Bytes of every file the checkpoint references (shared and private).
    pub fn state_bytes(&self) -> u64 {
        shared_objects_bytes(&self.manifest)
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
    /// The object.
    pub info: ObjectInfo,
}

/// One void record: the name of an abandoned checkpoint's job record, taken by its owner so
/// that a late put of the record can never land (`docs/ownership.md` rule 1).
#[derive(Debug, Clone)]
pub struct VoidRecordEntry {
    /// Checkpoint id.
    pub id: u64,
    /// When the owner voided the name, ms since the Unix epoch (its clock).
    pub voided_at_ms: u64,
    /// The object.
    pub info: ObjectInfo,
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
    /// Job records, by id (void records apart).
    pub job_records: Vec<JobRecordEntry>,
    /// Void records, by id.
    pub void_records: Vec<VoidRecordEntry>,
    /// Restore pins `(checkpoint id, ms the restore began, object)`.
    pub pins: Vec<(u64, u64, ObjectInfo)>,
    /// Objects that fit no known name.
    pub other: Vec<ObjectInfo>,
    /// Every checkpoint directory's objects (manifest included), by directory prefix.
    dirs: BTreeMap<String, Vec<ObjectInfo>>,
}

/// Decoded manifests by object name: objects are immutable, so a manifest read once never
/// needs reading again (the checkpoint owner keeps one across its passes).
pub type ManifestCache = Mutex<HashMap<String, Arc<CheckpointManifest>>>;

impl Catalog {
    /// Lists and classifies every object of `storage`, decoding every manifest and job record.
    /// A listing failure is an error; a damaged manifest or record is recorded, not an error.
    pub fn load(storage: &dyn CheckpointStorage) -> Result<Catalog> {
        Catalog::load_cached(storage, &ManifestCache::default())
    }

    /// [`Catalog::load`], taking decoded manifests from `cache` and adding the ones it reads
    /// (entries of manifests no longer in storage are dropped).
    pub fn load_cached(storage: &dyn CheckpointStorage, cache: &ManifestCache) -> Result<Catalog> {
        let mut objects = storage.list("")?;
        objects.sort_by(|a, b| a.name.cmp(&b.name));
        let mut cat = Catalog::default();
        let mut dirs: BTreeMap<(u64, String), Vec<ObjectInfo>> = BTreeMap::new();
        let mut shared = Vec::new();
        for o in objects {
            // Only names rockstate makes: other files under `shared/` are `other`, never garbage.
            if layout::parse_shared_name(&o.name).is_some() {
                shared.push(o);
            } else if let Some(id) = layout::parse_job_record_name(&o.name) {
                let bytes = match storage.get_bytes(&o.name) {
                    // Listed, then deleted by the job's owner: collected, not damaged.
                    Err(Error::ObjectNotFound { .. }) => continue,
                    // Storage that cannot be read now says nothing of the record.
                    Err(e) if unreadable(&e) => return Err(e),
                    other => other,
                };
                let record = bytes
                    .and_then(|b| sst_format::decode_job_record(&b).map_err(Error::format))
                    .map_err(|e| e.to_string())
                    // A record must describe the checkpoint its name says.
                    .and_then(|r| {
                        if r.checkpoint_id() == id {
                            Ok(r)
                        } else {
                            Err(format!("record describes checkpoint {}", r.checkpoint_id()))
                        }
                    });
                let record = match record {
                    Ok(JobRecord::Void(v)) => {
                        cat.void_records.push(VoidRecordEntry {
                            id,
                            voided_at_ms: v.voided_at_ms,
                            info: o,
                        });
                        continue;
                    }
                    Ok(JobRecord::Checkpoint(c)) => Ok(c),
                    Err(e) => Err(e),
                };
                cat.job_records.push(JobRecordEntry {
                    name: o.name.clone(),
                    id,
                    record,
                    info: o,
                });
            } else if let Some(p) = layout::parse_checkpoint_object(&o.name) {
                let key = (p.id, p.backend_id.to_string());
                dirs.entry(key).or_default().push(o);
            } else if let Some((id, ms)) = layout::parse_pin(&o.name) {
                cat.pins.push((id, ms, o));
            } else {
                cat.other.push(o);
            }
        }
        let live: HashSet<String> = dirs
            .keys()
            .map(|(id, backend)| layout::metadata_name(*id, backend))
            .collect();
        cache.lock().retain(|name, _| live.contains(name));
        for ((id, backend_id), objs) in dirs {
            cat.dirs
                .insert(layout::checkpoint_dir(id, &backend_id), objs.clone());
            let meta = layout::metadata_name(id, &backend_id);
            let Some(m) = objs.iter().find(|o| o.name == meta) else {
                cat.uncommitted.push(UncommittedDir {
                    id,
                    backend_id,
                    objects: objs,
                });
                continue;
            };
            let cached = cache.lock().get(&meta).cloned();
            let decoded = match cached {
                Some(m) => Ok(m),
                None => storage
                    .get_bytes(&meta)
                    .and_then(|b| decode_manifest_named(&meta, &b))
                    .map(|m| {
                        let m = Arc::new(m);
                        cache.lock().insert(meta.clone(), Arc::clone(&m));
                        m
                    }),
            };
            let decoded = decoded.and_then(|m| describes(&meta, id, &backend_id, &m).map(|()| m));
            match decoded {
                // Listed, then deleted by the job's owner: its directory is garbage in flight.
                Err(Error::ObjectNotFound { .. }) => cat.uncommitted.push(UncommittedDir {
                    id,
                    backend_id,
                    objects: objs.into_iter().filter(|o| o.name != meta).collect(),
                }),
                Ok(manifest) => cat.checkpoints.push(CommittedCheckpoint {
                    name: meta,
                    manifest_bytes: m.size,
                    manifest,
                }),
                Err(e) if unreadable(&e) => return Err(e),
                Err(e) => cat.bad_manifests.push((meta, e.to_string())),
            }
        }
        // A record naming a manifest the listing lacked: either the record was listed before
        // the job's owner deleted it (records go before their manifests), and is gone now,
        // or the listing passed the manifest's directory before a checkpoint completed and
        // reached the record after (manifests go before their records), and the manifest is
        // there now: it is read, before the shared files' references are counted.
        let mut seen: HashSet<String> = cat
            .checkpoints
            .iter()
            .map(|c| c.name.clone())
            .chain(cat.bad_manifests.iter().map(|(n, _)| n.clone()))
            .collect();
        let mut vanished = HashSet::new();
        let mut late: Vec<String> = Vec::new();
        for j in &cat.job_records {
            let Ok(r) = &j.record else { continue };
            let missing: Vec<&str> = r
                .tasks
                .iter()
                .filter_map(|t| t.manifest.as_deref())
                .filter(|m| !seen.contains(*m))
                .collect();
            if missing.is_empty() {
                continue;
            }
            if !storage.exists(&j.name)? {
                vanished.insert(j.name.clone());
                continue;
            }
            for m in missing {
                if storage.exists(m)? {
                    seen.insert(m.to_string());
                    late.push(m.to_string());
                }
            }
        }
        cat.job_records.retain(|j| !vanished.contains(&j.name));
        let any_late = !late.is_empty();
        for meta in late {
            let Some(p) = layout::parse_checkpoint_object(&meta) else {
                continue;
            };
            let loaded = storage.get_bytes(&meta).and_then(|b| {
                let m = decode_manifest_named(&meta, &b)?;
                describes(&meta, p.id, p.backend_id, &m)?;
                Ok((b.len() as u64, m))
            });
            match loaded {
                Ok((bytes, m)) => cat.checkpoints.push(CommittedCheckpoint {
                    name: meta,
                    manifest_bytes: bytes,
                    manifest: Arc::new(m),
                }),
                // Deleted again meanwhile: the record's check in classify refuses.
                Err(Error::ObjectNotFound { .. }) => {}
                Err(e) if unreadable(&e) => return Err(e),
                Err(e) => cat.bad_manifests.push((meta, e.to_string())),
            }
        }
        // In the listing's order (checkpoint id, then backend id), late ones among them.
        if any_late {
            cat.checkpoints.sort_by(|a, b| {
                (a.manifest.checkpoint_id, &a.manifest.backend_id)
                    .cmp(&(b.manifest.checkpoint_id, &b.manifest.backend_id))
            });
        }
        let mut refs: HashMap<&str, usize> = HashMap::new();
        for c in &cat.checkpoints {
            for name in shared_objects(&c.manifest) {
                *refs.entry(name).or_default() += 1;
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
        cat.void_records.sort_by_key(|v| v.id);
        Ok(cat)
    }

    /// The objects of checkpoint directory `dir` (a prefix from
    /// `layout::checkpoint_dir`), manifest first.
    fn dir_objects(&self, dir: &str) -> impl Iterator<Item = ObjectInfo> + '_ {
        let objects = self.dirs.get(dir).map(Vec::as_slice).unwrap_or(&[]);
        let is_meta = |o: &ObjectInfo| o.name.ends_with(layout::METADATA_FILE);
        objects
            .iter()
            .filter(move |o| is_meta(o))
            .chain(objects.iter().filter(move |o| !is_meta(o)))
            .cloned()
    }

    /// Every object name a committed manifest references.
    pub fn referenced(&self) -> HashSet<&str> {
        self.checkpoints
            .iter()
            .flat_map(|c| {
                shared_objects(&c.manifest).chain(
                    c.manifest
                        .private_files
                        .iter()
                        .map(|f| f.remote_name.as_str()),
                )
            })
            .collect()
    }
}

/// Storage split the way bounded storage is stated (`docs/ownership.md` §3 rule 5).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Bytes of every object.
    pub total_bytes: u64,
    /// The newest `retained` job records, the manifests they name and every file those
    /// reference.
    pub retained_bytes: u64,
    /// Objects of checkpoint ids above the newest job record (attempts in flight or
    /// acknowledgements that may still complete).
    pub newer_bytes: u64,
    /// Restore pins.
    pub pins: usize,
    /// Everything else: garbage a garbage pass removes.
    pub garbage_bytes: u64,
    /// The checkpoint ids that garbage belongs to (0 for objects whose name has none).
    pub garbage_ids: BTreeSet<u64>,
    /// Job records in storage (void records apart: they are neither retained nor garbage
    /// until a sweep finds them older than its minimum age; 26 bytes each).
    pub records: usize,
}

impl Footprint {
    /// Whether storage is within the bound of `docs/ownership.md` §3 rule 5, given the
    /// largest retained size seen so far (`live_max`): garbage is at most what one interrupted
    /// pass leaves (a subsumed checkpoint's own files and the last run's finished attempts),
    /// at most twice the largest live state.
    pub fn within_bound(&self, live_max: u64) -> bool {
        self.garbage_bytes <= 2 * live_max.max(self.retained_bytes)
    }
}

impl Catalog {
    /// Splits every object by [`Footprint`]'s classes, taking the newest `retained` job
    /// records as retained.
    pub fn footprint(&self, retained: usize) -> Footprint {
        let mut ids: Vec<u64> = self.job_records.iter().map(|j| j.id).collect();
        ids.sort_unstable();
        let newest = ids.last().copied().unwrap_or(0);
        let kept: BTreeSet<u64> = ids.iter().rev().take(retained).copied().collect();
        let mut named: HashSet<&str> = HashSet::new();
        for j in self.job_records.iter().filter(|j| kept.contains(&j.id)) {
            named.insert(&j.name);
            let Ok(r) = &j.record else { continue };
            for m in r.tasks.iter().filter_map(|t| t.manifest.as_deref()) {
                named.insert(m);
                if let Some(c) = self.checkpoints.iter().find(|c| c.name == m) {
                    named.extend(shared_objects(&c.manifest));
                    named.extend(
                        c.manifest
                            .private_files
                            .iter()
                            .map(|f| f.remote_name.as_str()),
                    );
                }
            }
        }
        let mut f = Footprint {
            records: ids.len(),
            ..Footprint::default()
        };
        f.total_bytes += self.void_records.iter().map(|v| v.info.size).sum::<u64>();
        let objects = self
            .dirs
            .values()
            .flatten()
            .chain(self.shared.iter().map(|s| &s.info))
            .chain(self.job_records.iter().map(|j| &j.info))
            .chain(self.pins.iter().map(|(_, _, o)| o))
            .chain(self.other.iter());
        for o in objects {
            f.total_bytes += o.size;
            let id = layout::parse_checkpoint_object(&o.name)
                .map(|p| p.id)
                .or_else(|| layout::parse_shared_name(&o.name).and_then(|s| s.checkpoint_id))
                .or_else(|| layout::parse_job_record_name(&o.name));
            if named.contains(o.name.as_str()) {
                f.retained_bytes += o.size;
            } else if layout::parse_pin(&o.name).is_some() {
                f.pins += 1;
            } else if id.is_some_and(|id| id > newest) {
                f.newer_bytes += o.size;
            } else {
                f.garbage_bytes += o.size;
                f.garbage_ids.insert(id.unwrap_or(0));
            }
        }
        f
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

/// Checks that manifest `m`, stored as `meta`, describes the checkpoint its name says
/// (checkpoint `id` of `backend_id`).
fn describes(meta: &str, id: u64, backend_id: &str, m: &CheckpointManifest) -> Result<()> {
    if m.checkpoint_id == id && m.backend_id == backend_id {
        return Ok(());
    }
    Err(Error::CheckpointCorrupt {
        file: meta.to_string(),
        detail: format!(
            "manifest describes checkpoint {} of backend {}",
            m.checkpoint_id, m.backend_id
        ),
    })
}

/// Whether `e`, met reading an object, is a failure to read (storage or local I/O, a timeout)
/// rather than an answer about the object (missing, damaged).
fn unreadable(e: &Error) -> bool {
    matches!(e.kind(), ErrorKind::Io | ErrorKind::Transient)
}

/// Reads every file a committed manifest references and checks its size and CRC-32 against
/// the manifest, and for shared SSTs the footer, block checksums, properties and unique id;
/// reports undecodable manifests and job records, and job records naming a manifest that is
/// not committed. `storage` must be the one `catalog` was loaded from.
pub fn verify(storage: &dyn CheckpointStorage, catalog: &Catalog) -> Result<Verification> {
    let scratch = tempfile::tempdir().map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let mut v = Verification {
        records: catalog.checkpoints.len() + catalog.job_records.len() + catalog.void_records.len(),
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
                    if !committed.contains(m) && storage.exists(&j.name)? {
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
            .map(|f| (&f.remote_name, f.size, f.crc32, Contents::Sst(&f.sst_id)))
            .chain(
                c.manifest
                    .private_files
                    .iter()
                    .map(|f| (&f.remote_name, f.size, f.crc32, Contents::Private)),
            )
            .chain(c.manifest.changelog.iter().flat_map(|l| {
                l.segments
                    .iter()
                    .map(|s| (&s.remote_name, s.size, s.crc32, Contents::Segment(s)))
            }))
            .chain(c.manifest.changelog.iter().flat_map(|l| {
                l.tables.iter().flat_map(|t| {
                    t.files
                        .iter()
                        .map(|f| (&f.remote_name, f.size, f.crc32, Contents::Table))
                })
            }));
        for (remote, size, crc32, contents) in files {
            if !seen.insert(remote.as_str()) {
                continue;
            }
            v.files_checked += 1;
            let local = scratch.path().join(format!("f{}", v.files_checked));
            match storage.get_file(remote, &local) {
                // The owner deletes a manifest before its files: with the manifest gone too,
                // the checkpoint was collected meanwhile, not damaged.
                Err(Error::ObjectNotFound { .. }) if !storage.exists(&c.name)? => {
                    v.files_checked -= 1;
                    seen.remove(remote.as_str());
                }
                // A storage or local failure (a full scratch directory, a timeout, denied
                // access) says nothing of the stored file: the check itself failed.
                Err(e) if unreadable(&e) => return Err(e),
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
                    } else if let Contents::Segment(s) = contents {
                        let checked = std::fs::read(&local)
                            .map_err(|e| e.to_string())
                            .and_then(|b| {
                                sst_format::decode_log_segment(&b).map_err(|e| e.to_string())
                            })
                            .and_then(|seg| {
                                if (seg.first_seq(), seg.count()) == (s.first_seq, s.entries) {
                                    Ok(())
                                } else {
                                    Err(format!(
                                        "holds entries {}.. ({}), {} says {}.. ({})",
                                        seg.first_seq(),
                                        seg.count(),
                                        c.name,
                                        s.first_seq,
                                        s.entries
                                    ))
                                }
                            });
                        if let Err(e) = checked {
                            v.problems
                                .push(problem(remote, format!("log segment: {e}")));
                        }
                    } else if let Contents::Table = contents {
                        if let Err(e) = sst_format::read_sst_meta(&local) {
                            v.problems
                                .push(problem(remote, format!("log table SST: {e}")));
                        }
                    } else if let Contents::Sst(expected) = contents {
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

/// What [`verify`] checks inside a file beyond its size and CRC-32.
enum Contents<'a> {
    /// An SST: its footer, properties and unique id.
    Sst(&'a SstUniqueId),
    /// A private file: nothing more.
    Private,
    /// A changelog segment: its own checks, first sequence number and entry count.
    Segment(&'a LogSegmentFile),
    /// A file of a log table: an SST's footer and properties.
    Table,
}

/// Why [`classify`] deletes an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GcReason {
    /// A job record older than the newest `retained`: the checkpoint is subsumed.
    SubsumedRecord,
    /// An object of a task checkpoint whose id is not above the newest completed checkpoint
    /// and that no retained job record names: its attempt was subsumed, aborted or died,
    /// and can never complete.
    Finished,
    /// An object of a checkpoint directory without a manifest whose id is above the newest
    /// completed checkpoint, older than the minimum age (an attempt that died).
    Uncommitted,
    /// A shared file nothing retained, pending or pinned references, uploaded by an attempt
    /// whose id is not above the newest completed checkpoint.
    FinishedShared,
    /// A shared file nothing references whose put began at least the minimum age ago (or,
    /// for a name without a time, whose storage time is that old).
    UnreferencedShared,
    /// A restore pin at least the minimum age old: its restore finished or died.
    ExpiredPin,
    /// A job record that landed after its checkpoint ended not completed: a put the store
    /// applied after its client gave up, once a newer checkpoint had completed or the owner
    /// had found the record absent. Never retained (what it names may be deleted); only the
    /// job's owner, which remembers its abandoned puts, tells one apart.
    AbandonedRecord,
    /// A void record (an abandoned checkpoint's record name, taken so that a late put of the
    /// record can never land) at least the minimum age old: no put of that record can still
    /// be in flight.
    ExpiredVoid,
}

/// What a garbage classification may delete.
#[derive(Debug, Clone, Default)]
pub struct GcPolicy {
    /// Job records kept (the newest). `usize::MAX` keeps every record (`rockstate gc`: the
    /// job's retention is the owner's business).
    pub retained: usize,
    /// Garbage that may still belong to an attempt in flight is deleted once it is this old;
    /// `None` never deletes it (what the owner does right after a completion).
    pub min_age: Option<Duration>,
    /// Now, ms since the Unix epoch on the deciding clock.
    pub now_ms: u64,
    /// Shared names attempts in flight in this process may reference, and their checkpoint
    /// directories (`layout::checkpoint_dir`).
    pub protected: HashSet<String>,
    /// Pins whose restore began before this time (ms) are released whatever their age: the
    /// owner's open time, since every restore of the job's current run began after it and
    /// one that began before belongs to a run that is gone.
    pub pins_before_ms: Option<u64>,
    /// Checkpoint ids up to this one are finished even above the newest record: the highest
    /// id in storage when the owner opened (its run never completes those ids; attempts in
    /// flight in its process are protected).
    pub finished_up_to: Option<u64>,
}

/// What garbage collection would delete.
#[derive(Debug, Clone, Default)]
pub struct GcPlan {
    /// Objects to delete, with why, in the order to delete them: job records, then
    /// manifests, then the other objects of checkpoint directories, then shared files, then
    /// pins, then void records once old enough (so a crash between two deletes never leaves
    /// a record or manifest that names a deleted object).
    pub delete: Vec<(ObjectInfo, GcReason)>,
    /// Garbage younger than the minimum age, kept (it may belong to a checkpoint in flight).
    pub too_young: Vec<ObjectInfo>,
    /// The retained job record ids, ascending.
    pub retained: Vec<u64>,
    /// The policy it was made with ([`gc_apply`] classifies again with it).
    pub policy: GcPolicy,
    /// Checkpoint ids a restore pin protected.
    pub pinned: BTreeSet<u64>,
}

impl GcPlan {
    /// Total bytes of the objects to delete.
    pub fn bytes(&self) -> u64 {
        self.delete.iter().map(|(o, _)| o.size).sum()
    }
}

/// Classifies every object of `catalog` as kept or garbage under `policy` (rules in
/// `docs/ownership.md` §4):
///
/// 1. the newest `retained` job records are retained, older ones are subsumed; `L` is the
///    newest record's id;
/// 2. a task checkpoint named by a retained record, or of a pinned id, is live; one with an
///    id above `L` and a manifest is pending (it may still complete); one with an id up to
///    `L` is finished and deleted whatever its age; one above `L` without a manifest is an
///    attempt in flight until it is `min_age` old;
/// 3. a shared file referenced by a live, pending or pinned manifest or protected in memory
///    is kept; otherwise it is deleted if its uploader's checkpoint id is up to `L`, or once
///    it is `min_age` old;
/// 4. pins are deleted once `min_age` old, or when their restore began before
///    `pins_before_ms`; only the others protect their checkpoint;
/// 5. void records are deleted once `min_age` old by the time their owner wrote them: no put
///    of their checkpoint's record can still be in flight; they never count as records.
///
/// Refused with [`Error::CheckpointCorrupt`] while a retained job record, or a manifest that
/// is live, pending or pinned, cannot be decoded: what it references is unknown. A subsumed
/// record is deleted whatever its bytes (what it named is kept only by the retained ones).
pub fn classify(catalog: &Catalog, policy: &GcPolicy) -> Result<GcPlan> {
    let refuse = |name: &str, e: &str| Error::CheckpointCorrupt {
        file: name.to_string(),
        detail: format!("{e}; refusing to collect garbage while references are unknown"),
    };
    let mut records: Vec<&JobRecordEntry> = catalog.job_records.iter().collect();
    records.sort_by_key(|j| j.id);
    let keep_from = records.len().saturating_sub(policy.retained);
    let (subsumed, kept) = records.split_at(keep_from);
    // A retained record that cannot be decoded keeps files nobody can name: refused. A
    // subsumed one keeps nothing, so its bytes do not matter: it goes by its name.
    let mut retained: Vec<(u64, &JobCheckpoint, &ObjectInfo)> = Vec::new();
    for j in kept {
        match &j.record {
            Ok(r) => retained.push((j.id, r, &j.info)),
            Err(e) => return Err(refuse(&j.name, e)),
        }
    }
    let newest = retained.last().map(|(id, _, _)| *id);
    let old_enough = |put_ms: u64| match policy.min_age {
        Some(age) => crate::clock::is_older_than(put_ms, policy.now_ms, age),
        None => false,
    };
    let expired_pin = |ms: u64| old_enough(ms) || policy.pins_before_ms.is_some_and(|b| ms < b);
    let pinned: BTreeSet<u64> = catalog
        .pins
        .iter()
        .filter(|(_, ms, _)| !expired_pin(*ms))
        .map(|(id, _, _)| *id)
        .collect();
    let live_manifests: HashSet<&str> = retained
        .iter()
        .flat_map(|(_, r, _)| r.tasks.iter().filter_map(|t| t.manifest.as_deref()))
        .collect();
    for m in &live_manifests {
        if !catalog.checkpoints.iter().any(|c| c.name.as_str() == *m)
            && !catalog.bad_manifests.iter().any(|(n, _)| n.as_str() == *m)
        {
            return Err(refuse(
                m,
                "named by a retained job record, missing from storage",
            ));
        }
    }
    let finished_up_to = newest.max(policy.finished_up_to);
    let finished = |id: u64| finished_up_to.is_some_and(|l| id <= l);
    let kept_dir = |id: u64, name: &str| {
        live_manifests.contains(name)
            || pinned.contains(&id)
            || !finished(id)
            || layout::parse_checkpoint_object(name).is_some_and(|p| {
                policy
                    .protected
                    .contains(&layout::checkpoint_dir(id, p.backend_id))
            })
    };
    for (name, e) in &catalog.bad_manifests {
        if let Some(p) = layout::parse_checkpoint_object(name) {
            if kept_dir(p.id, name) {
                return Err(refuse(name, e));
            }
        }
    }

    let mut plan = GcPlan {
        retained: retained.iter().map(|(id, _, _)| *id).collect(),
        policy: policy.clone(),
        pinned: pinned.clone(),
        ..GcPlan::default()
    };
    for j in subsumed {
        if !pinned.contains(&j.id) {
            plan.delete.push((j.info.clone(), GcReason::SubsumedRecord));
        }
    }

    // Task checkpoints: manifests first, then their other objects.
    let mut live_shared: HashSet<&str> = policy.protected.iter().map(String::as_str).collect();
    let mut dir_objects: Vec<(ObjectInfo, GcReason)> = Vec::new();
    let mut manifests: Vec<(ObjectInfo, GcReason)> = Vec::new();
    for c in &catalog.checkpoints {
        // The directory is the one the object's name says (a manifest whose content names
        // another checkpoint must not make another directory garbage).
        let Some(named) = layout::parse_checkpoint_object(&c.name) else {
            continue;
        };
        let id = named.id;
        if kept_dir(id, &c.name) || c.manifest.checkpoint_id != id {
            live_shared.extend(shared_objects(&c.manifest));
            continue;
        }
        let dir = layout::checkpoint_dir(id, named.backend_id);
        for o in catalog.dir_objects(&dir) {
            let into = if o.name == c.name {
                &mut manifests
            } else {
                &mut dir_objects
            };
            into.push((o, GcReason::Finished));
        }
    }
    for (name, _) in &catalog.bad_manifests {
        // Only finished ones get here (see the refusal above).
        if let Some(p) = layout::parse_checkpoint_object(name) {
            for o in catalog.dir_objects(&layout::checkpoint_dir(p.id, p.backend_id)) {
                let into = if o.name == *name {
                    &mut manifests
                } else {
                    &mut dir_objects
                };
                into.push((o, GcReason::Finished));
            }
        }
    }
    for d in &catalog.uncommitted {
        let dir = layout::checkpoint_dir(d.id, &d.backend_id);
        if pinned.contains(&d.id) || policy.protected.contains(&dir) {
            continue;
        }
        if finished(d.id) {
            dir_objects.extend(d.objects.iter().cloned().map(|o| (o, GcReason::Finished)));
        } else if d
            .objects
            .iter()
            .all(|o| old_enough(millis_since_epoch(o.last_modified)))
        {
            dir_objects.extend(
                d.objects
                    .iter()
                    .cloned()
                    .map(|o| (o, GcReason::Uncommitted)),
            );
        } else {
            plan.too_young.extend(d.objects.iter().cloned());
        }
    }
    plan.delete.extend(manifests);
    plan.delete.extend(dir_objects);

    for s in &catalog.shared {
        if live_shared.contains(s.info.name.as_str()) {
            continue;
        }
        let parsed = layout::parse_shared_name(&s.info.name);
        let uploader = parsed.and_then(|p| p.checkpoint_id);
        let put_ms = parsed
            .and_then(|p| p.put_ms)
            .unwrap_or_else(|| millis_since_epoch(s.info.last_modified));
        if uploader.is_some_and(|c| finished(c) && !pinned.contains(&c)) {
            plan.delete.push((s.info.clone(), GcReason::FinishedShared));
        } else if old_enough(put_ms) {
            plan.delete
                .push((s.info.clone(), GcReason::UnreferencedShared));
        } else {
            plan.too_young.push(s.info.clone());
        }
    }
    for (_, ms, info) in &catalog.pins {
        if expired_pin(*ms) {
            plan.delete.push((info.clone(), GcReason::ExpiredPin));
        }
    }
    for v in &catalog.void_records {
        if old_enough(v.voided_at_ms) {
            plan.delete.push((v.info.clone(), GcReason::ExpiredVoid));
        }
    }
    Ok(plan)
}

/// Plans garbage collection for `rockstate gc`: [`classify`] keeping every job record, with
/// `min_age` as the age garbage of attempts in flight must reach, at `now_ms` (milliseconds
/// since the Unix epoch, from the caller's [`crate::Clock`]).
pub fn gc_plan(catalog: &Catalog, min_age: Duration, now_ms: u64) -> Result<GcPlan> {
    classify(
        catalog,
        &GcPolicy {
            retained: usize::MAX,
            min_age: Some(min_age),
            now_ms,
            protected: HashSet::new(),
            pins_before_ms: None,
            finished_up_to: None,
        },
    )
}

/// What [`gc_apply`] did.
#[derive(Debug)]
#[non_exhaustive]
pub struct GcApplied {
    /// The objects deleted, in the order they were.
    pub deleted: Vec<ObjectInfo>,
    /// The failed delete that stopped the pass, if one did (the objects after it are left
    /// for the next pass; those before it are in `deleted`).
    pub stopped_by: Option<Error>,
}

/// Deletes what `plan` lists, after loading the catalog again and classifying it with the
/// plan's policy: only objects that are garbage in both are deleted (anything a checkpoint
/// completed or a restore pinned meanwhile is kept), in the order of the new plan. A failed
/// delete stops the pass (the order is what makes each step safe) and is returned with the
/// objects deleted before it; `Err` only when nothing was deleted because the catalog could
/// not be loaded or classified again.
pub fn gc_apply(storage: &dyn CheckpointStorage, plan: &GcPlan) -> Result<GcApplied> {
    let again = classify(&Catalog::load(storage)?, &plan.policy)?;
    let planned: HashSet<&str> = plan.delete.iter().map(|(o, _)| o.name.as_str()).collect();
    let mut applied = GcApplied {
        deleted: Vec::new(),
        stopped_by: None,
    };
    for (o, _) in again.delete {
        if planned.contains(o.name.as_str()) {
            if let Err(e) = storage.delete(&o.name) {
                applied.stopped_by = Some(e);
                break;
            }
            applied.deleted.push(o);
        }
    }
    Ok(applied)
}

/// Every shared object `m` references: its SSTs, then its changelog segments, then the
/// files of its log tables.
pub fn shared_objects(m: &CheckpointManifest) -> impl Iterator<Item = &str> {
    let log = m.changelog.iter();
    m.shared_files
        .iter()
        .map(|f| f.remote_name.as_str())
        .chain(
            log.clone()
                .flat_map(|c| c.segments.iter().map(|s| s.remote_name.as_str())),
        )
        .chain(log.flat_map(|c| {
            c.tables
                .iter()
                .flat_map(|t| t.files.iter().map(|f| f.remote_name.as_str()))
        }))
}

/// Bytes of every shared object `m` references (see [`shared_objects`]).
pub fn shared_objects_bytes(m: &CheckpointManifest) -> u64 {
    let log = m.changelog.iter();
    m.shared_files.iter().map(|f| f.size).sum::<u64>()
        + log
            .clone()
            .flat_map(|c| c.segments.iter().map(|s| s.size))
            .sum::<u64>()
        + log
            .flat_map(|c| c.tables.iter().flat_map(|t| t.files.iter().map(|f| f.size)))
            .sum::<u64>()
}

/// What a failed fetch of object `name`, which a manifest names, means: a missing object is
/// [`Error::CheckpointCorrupt`] naming it; any other error stays as it is.
pub(crate) fn named_fetch_error(name: &str, e: Error) -> Error {
    match e {
        Error::ObjectNotFound { .. } => Error::CheckpointCorrupt {
            file: name.to_string(),
            detail: "missing from storage".into(),
        },
        e => e,
    }
}

/// Checks the digest `got` of the fetched object `name` against the size and CRC-32 its
/// manifest records: other bytes are [`Error::CheckpointCorrupt`] naming it.
pub(crate) fn check_digest(name: &str, got: ObjectDigest, size: u64, crc32: u32) -> Result<()> {
    let detail = if got.size != size {
        format!("{} bytes, manifest says {size}", got.size)
    } else if got.crc32 != crc32 {
        format!("crc32 {:08x}, manifest says {crc32:08x}", got.crc32)
    } else {
        return Ok(());
    };
    Err(Error::CheckpointCorrupt {
        file: name.to_string(),
        detail,
    })
}

/// Decodes manifest bytes, naming the object on failure.
pub(crate) fn decode_manifest_named(name: &str, bytes: &[u8]) -> Result<CheckpointManifest> {
    sst_format::decode_manifest(bytes).map_err(|e| Error::CheckpointCorrupt {
        file: name.to_string(),
        detail: e.to_string(),
    })
}
