//! Every object name and local staging path the checkpoint code uses, in one place (as SlateDB
//! keeps its path scheme in one module). `docs/checkpoint-format.md` describes the same layout.
//!
//! ```text
//! <root>/shared/<id>-<ms>-<16 hex>.sst       SSTs (RocksDB's, and the files of changelog log
//!                                            tables): uploaded by an attempt of checkpoint <id>
//!                                            whose put began at <ms> (uploader's clock); never
//!                                            reused (older `shared/<32 hex>.sst` names are read)
//! <root>/shared/<id>-<ms>-<16 hex>.log       changelog segments (docs/changelog-format.md),
//!                                            named and collected like SSTs
//! <root>/chk-<id>/<backend-id>/<local name>  private files of one checkpoint of one backend
//! <root>/chk-<id>/<backend-id>/_metadata     that backend's snapshot for <id> (its ack)
//! <root>/job/chk-<id>                        the job record: checkpoint <id> completed
//! <root>/pins/<id>/<ms>-<16 hex>             empty: a restore reading checkpoint <id> that
//!                                            began at <ms>; nothing of <id> is deleted
//! ```
//! Local staging: `<staging root>/<backend-id>/snap-<id>/` (a RocksDB checkpoint directory);
//! after a successful upload it becomes the local copy `<staging root>/<backend-id>/local-<id>/`
//! (local recovery, see `checkpoint::local_recovery`); changelog segments cut and not yet
//! covered by a materialization sit in `<staging root>/<backend-id>/log/`, and the log tables
//! an upload builds in `log/tables-<id>/` until they are uploaded.

use std::path::{Path, PathBuf};

/// Prefix of every shared object.
pub const SHARED_PREFIX: &str = "shared/";
/// Prefix of every checkpoint directory.
pub const CHECKPOINT_PREFIX: &str = "chk-";
/// File name of the manifest in a checkpoint directory.
pub const METADATA_FILE: &str = "_metadata";
/// Name of the staging directory created next to backend directories.
pub(crate) const STAGING_DIR_NAME: &str = ".rockstate-staging";

/// A fresh random 128-bit hex identifier (backend ids, shared object names).
pub(crate) fn random_hex() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// A new backend id.
pub(crate) fn new_backend_id() -> String {
    random_hex()
}

/// A fresh name for an SST uploaded by an attempt of checkpoint `checkpoint_id` whose put
/// begins at `now_ms`; never returned twice. The id lets garbage collection tell an upload of
/// a finished checkpoint from one in flight, the time gives its age (an object's storage time
/// may be older: a local storage hard-links the SST RocksDB wrote long before).
pub fn new_shared_name(checkpoint_id: u64, now_ms: u64) -> String {
    format!(
        "{SHARED_PREFIX}{checkpoint_id}-{now_ms}-{:016x}.sst",
        rand::random::<u64>()
    )
}

/// A fresh name for a changelog segment uploaded by an attempt of checkpoint
/// `checkpoint_id` whose put begins at `now_ms` (see [`new_shared_name`]).
pub fn new_log_name(checkpoint_id: u64, now_ms: u64) -> String {
    format!(
        "{SHARED_PREFIX}{checkpoint_id}-{now_ms}-{:016x}.log",
        rand::random::<u64>()
    )
}

/// Whether `name` is a shared object name.
pub fn is_shared_name(name: &str) -> bool {
    name.strip_prefix(SHARED_PREFIX)
        .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'))
}

/// What a shared object's name says about it: the checkpoint whose attempt uploaded it and
/// when its put began (ms). Both `None` for names of the older form `shared/<32 hex>.sst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedName {
    /// The checkpoint id of the uploading attempt.
    pub checkpoint_id: Option<u64>,
    /// When the put began, ms on the uploader's clock.
    pub put_ms: Option<u64>,
}

/// Parses a shared object name this module makes ([`new_shared_name`], [`new_log_name`], or
/// the older `shared/<32 hex>.sst`); `None` for any other name, also one under `shared/`. A
/// storage may hold other systems' files there (Flink's `shared/<uuid>`, RocksDB backups'
/// `shared/000123.sst`): garbage collection deletes only names this returns `Some` for.
pub fn parse_shared_name(name: &str) -> Option<SharedName> {
    if !is_shared_name(name) {
        return None;
    }
    let rest = &name[SHARED_PREFIX.len()..];
    let lower_hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if let Some(stem) = rest.strip_suffix(".sst") {
        if lower_hex(stem, 32) {
            return Some(SharedName {
                checkpoint_id: None,
                put_ms: None,
            });
        }
    }
    let stem = rest
        .strip_suffix(".sst")
        .or_else(|| rest.strip_suffix(".log"))?;
    let mut parts = stem.split('-');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(id), Some(ms), Some(tail), None) if lower_hex(tail, 16) => Some(SharedName {
            checkpoint_id: Some(decimal(id)?),
            put_ms: Some(decimal(ms)?),
        }),
        _ => None,
    }
}

/// A decimal number as this layout writes it (digits only, no leading zero but in `0`),
/// `None` otherwise: `0001` is no name rockstate makes, so an object named with it is
/// another system's and never garbage.
fn decimal(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

/// The directory (prefix, ending in `/`) of checkpoint `id` of backend `backend_id`.
pub fn checkpoint_dir(id: u64, backend_id: &str) -> String {
    format!("{CHECKPOINT_PREFIX}{id}/{backend_id}/")
}

/// The object name of private file `local_name` of checkpoint `id` of `backend_id`.
pub fn private_name(id: u64, backend_id: &str, local_name: &str) -> String {
    format!("{}{local_name}", checkpoint_dir(id, backend_id))
}

/// The manifest (commit point) of checkpoint `id` of `backend_id`.
pub fn metadata_name(id: u64, backend_id: &str) -> String {
    format!("{}{METADATA_FILE}", checkpoint_dir(id, backend_id))
}

/// Prefix of every restore pin.
pub const PIN_PREFIX: &str = "pins/";

/// A fresh pin on checkpoint `id` by a restore that begins at `now_ms`.
pub fn new_pin_name(id: u64, now_ms: u64) -> String {
    format!("{PIN_PREFIX}{id}/{now_ms}-{:016x}", rand::random::<u64>())
}

/// Parses `pins/<id>/<ms>-<16 hex>` into `(id, ms)`.
pub fn parse_pin(name: &str) -> Option<(u64, u64)> {
    let rest = name.strip_prefix(PIN_PREFIX)?;
    let (id, tail) = rest.split_once('/')?;
    let (ms, random) = tail.split_once('-')?;
    if random.len() != 16 || !random.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some((decimal(id)?, decimal(ms)?))
}

/// Prefix of the job-level checkpoint records the coordinator writes
/// (`docs/job-record-format.md`).
pub const JOB_PREFIX: &str = "job/";

/// The job record of checkpoint `id`: `job/chk-<id>`.
pub fn job_record_name(id: u64) -> String {
    format!("{JOB_PREFIX}{CHECKPOINT_PREFIX}{id}")
}

/// The checkpoint id of job record object `name`; `None` for any other name.
pub fn parse_job_record_name(name: &str) -> Option<u64> {
    decimal(
        name.strip_prefix(JOB_PREFIX)?
            .strip_prefix(CHECKPOINT_PREFIX)?,
    )
}

/// An object inside a checkpoint directory, split into its parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointObject<'a> {
    /// Checkpoint id.
    pub id: u64,
    /// Backend id.
    pub backend_id: &'a str,
    /// File name inside the checkpoint directory.
    pub file: &'a str,
}

impl CheckpointObject<'_> {
    /// Whether this object is a manifest.
    pub fn is_metadata(&self) -> bool {
        self.file == METADATA_FILE
    }
}

/// Parses `chk-<id>/<backend>/<file>` as this layout writes it (a canonical decimal id, a
/// backend id and a file name of ASCII letters, digits, `.`, `_` and `-`); `None` for any other
/// name, which is then another system's object: listed, never deleted.
pub fn parse_checkpoint_object(name: &str) -> Option<CheckpointObject<'_>> {
    let rest = name.strip_prefix(CHECKPOINT_PREFIX)?;
    let mut parts = rest.splitn(3, '/');
    let id = decimal(parts.next()?)?;
    let backend_id = parts.next()?;
    let file = parts.next()?;
    if !valid_local_name(backend_id) || !valid_local_name(file) {
        return None;
    }
    Some(CheckpointObject {
        id,
        backend_id,
        file,
    })
}

/// Whether `name` is acceptable as a file name inside a RocksDB directory (what a manifest's
/// `local_name` may be): one plain component of ASCII letters, digits, `.`, `_`, `-`, not
/// starting with `.`, at most 255 bytes.
pub(crate) fn valid_local_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The default staging root of a backend stored in `db_path`: a sibling directory, so the
/// RocksDB checkpoint can hard-link SSTs (same filesystem).
pub fn default_staging_root(db_path: &Path) -> PathBuf {
    match db_path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.join(STAGING_DIR_NAME),
        _ => PathBuf::from(STAGING_DIR_NAME),
    }
}

/// The local staging directory of checkpoint `id` of `backend_id`.
pub(crate) fn staging_dir(staging_root: &Path, backend_id: &str, id: u64) -> PathBuf {
    staging_root.join(backend_id).join(format!("snap-{id}"))
}

/// Name of a backend's directory of changelog segment files in its staging directory.
pub(crate) const LOG_DIR_NAME: &str = "log";

/// Changelog mode: the directory of the segment files a backend cut and has not yet seen
/// covered by a completed materialization, `<staging root>/<backend-id>/log/`; each file is
/// `<first sequence number>-<end sequence number>.rscl`.
pub(crate) fn log_dir(staging_root: &Path, backend_id: &str) -> PathBuf {
    staging_root.join(backend_id).join(LOG_DIR_NAME)
}

/// Changelog mode: where the async phase of checkpoint `checkpoint_id` writes the log
/// tables it uploads, `<log dir>/tables-<id>/` (removed once they are uploaded, and with the
/// log directory otherwise).
pub(crate) fn table_build_dir(
    staging_root: &Path,
    backend_id: &str,
    checkpoint_id: u64,
) -> PathBuf {
    log_dir(staging_root, backend_id).join(format!("tables-{checkpoint_id}"))
}

/// Name prefix of local-copy directories.
const LOCAL_COPY_PREFIX: &str = "local-";

/// The local copy (local recovery) of checkpoint `id` of `backend_id`.
pub fn local_copy_dir(staging_root: &Path, backend_id: &str, id: u64) -> PathBuf {
    staging_root
        .join(backend_id)
        .join(format!("{LOCAL_COPY_PREFIX}{id}"))
}

/// The checkpoint id of a local-copy directory name (`local-<id>`); `None` for other names.
pub fn parse_local_copy_dir(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(LOCAL_COPY_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_this_layout_writes_parse() {
        let b = "0123456789abcdef0123456789abcdef";
        assert_eq!(parse_job_record_name("job/chk-10"), Some(10));
        assert_eq!(parse_job_record_name("job/chk-0"), Some(0));
        for name in ["job/chk-010", "job/chk-", "job/chk-+1", "job/chk-1a"] {
            assert_eq!(parse_job_record_name(name), None, "{name}");
        }
        let meta = metadata_name(7, b);
        let p = parse_checkpoint_object(&meta).unwrap();
        assert_eq!((p.id, p.backend_id, p.is_metadata()), (7, b, true));
        assert!(parse_checkpoint_object(&private_name(7, b, "MANIFEST-000005")).is_some());
        for name in [
            format!("chk-0007/{b}/_metadata"),
            format!("chk-7/{b}/notes\\1.txt"),
            format!("chk-7/{b}/.hidden"),
            format!("chk-7/{b}/a/b"),
            "chk-7/bad backend/CURRENT".to_string(),
        ] {
            assert!(parse_checkpoint_object(&name).is_none(), "{name}");
        }
        assert!(parse_pin("pins/01/5-0123456789abcdef").is_none());
        assert!(parse_shared_name("shared/01-5-0123456789abcdef.sst").is_none());
    }

    #[test]
    fn names_round_trip() {
        let n = metadata_name(7, "ab");
        assert_eq!(n, "chk-7/ab/_metadata");
        let o = parse_checkpoint_object(&n).unwrap();
        assert_eq!(
            (o.id, o.backend_id, o.file, o.is_metadata()),
            (7, "ab", "_metadata", true)
        );
        assert_eq!(private_name(7, "ab", "CURRENT"), "chk-7/ab/CURRENT");
        assert!(parse_checkpoint_object("chk-x/ab/CURRENT").is_none());
        assert!(parse_checkpoint_object("chk-7/ab").is_none());
        assert!(parse_checkpoint_object("chk-7/ab/c/d").is_none());
        assert!(parse_checkpoint_object("chk-+7/ab/c").is_none());
        let s = new_shared_name(12, 1_700_000_000_123);
        assert!(is_shared_name(&s) && s.ends_with(".sst"));
        assert_ne!(s, new_shared_name(12, 1_700_000_000_123));
        let l = new_log_name(12, 1_700_000_000_123);
        assert!(l.ends_with(".log") && is_shared_name(&l));
        assert_eq!(
            parse_shared_name(&l),
            Some(SharedName {
                checkpoint_id: Some(12),
                put_ms: Some(1_700_000_000_123),
            })
        );
        assert_eq!(
            parse_shared_name(&s),
            Some(SharedName {
                checkpoint_id: Some(12),
                put_ms: Some(1_700_000_000_123)
            })
        );
        let legacy = format!("{SHARED_PREFIX}{}.sst", random_hex());
        assert_eq!(
            parse_shared_name(&legacy),
            Some(SharedName {
                checkpoint_id: None,
                put_ms: None
            })
        );
        assert_eq!(parse_shared_name("chk-1/a/b"), None);
        // Names of other systems under `shared/` are not rockstate's.
        for foreign in [
            "shared/+1-2-0123456789abcdef.sst",
            "shared/1-2-0123456789ABCDEF.sst",
            "shared/1-2-0123456789abcdef",
            "shared/1-2-0123456789abcdef.txt",
            "shared/9f1c2b7e-3c44-4a8e-bd42-1f0e8f1f3a77",
            "shared/000123.sst",
            &format!("{SHARED_PREFIX}{}.log", random_hex()),
        ] {
            assert_eq!(parse_shared_name(foreign), None, "{foreign}");
        }
        assert!(valid_local_name("000012.sst") && valid_local_name("MANIFEST-000005"));
        assert_eq!(job_record_name(42), "job/chk-42");
        assert_eq!(parse_job_record_name("job/chk-42"), Some(42));
        assert_eq!(parse_job_record_name("job/chk-"), None);
        assert_eq!(parse_job_record_name("job/chk-4/x"), None);
        assert_eq!(parse_job_record_name("chk-4"), None);
        assert!(!valid_local_name("../x") && !valid_local_name("a/b") && !valid_local_name(".x"));
        let p = new_pin_name(7, 99);
        assert!(p.starts_with("pins/7/99-"));
        assert_eq!(parse_pin(&p), Some((7, 99)));
        assert!(
            parse_pin("pins/7/99").is_none() && parse_pin("pins/x/1-0123456789abcdef").is_none()
        );
        assert!(parse_pin("pins/7/1-0123456789abcdeg").is_none());
        let local = local_copy_dir(Path::new("/s"), "ab", 12);
        assert_eq!(local, Path::new("/s/ab/local-12"));
        let name = local.file_name().unwrap().to_str().unwrap();
        assert_eq!(parse_local_copy_dir(name), Some(12));
        assert_eq!(parse_local_copy_dir("snap-12"), None);
        assert_eq!(parse_local_copy_dir("local-"), None);
        assert_eq!(parse_local_copy_dir("local-+1"), None);
    }
}
