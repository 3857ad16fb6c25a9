//! The crate's one error type. Every failure a caller can see is a variant here, so bad input
//! (wrong key group, oversized value, mismatched state metadata, corrupt files) is a typed
//! error instead of a panic or silently wrong state. [`Error::kind`] sorts the variants into a
//! few [`ErrorKind`]s a caller decides on (fix the input, retry, give up, investigate).

use std::path::PathBuf;

/// Result alias used across the crate.
pub type Result<T> = std::result::Result<T, Error>;

/// What kind of failure an [`Error`] is: coarse enough to decide on, whatever the variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The caller asked for something invalid: a key outside the backend's key groups, an
    /// oversized value, state registered with other types, a bad option, name or URL. Fix the
    /// call; retrying it fails again.
    InvalidInput,
    /// What was asked for does not exist: a checkpoint, an object, a file.
    NotFound,
    /// Stored bytes are damaged or inconsistent: a checksum, a decoder, a checkpoint that
    /// disagrees with itself. Never retried into silently wrong state.
    Corruption,
    /// Another actor's state is in the way: an object that exists already, another owner's
    /// checkpoints, an ambiguous or aborted checkpoint, a directory holding something else.
    Conflict,
    /// A failure that retrying may cure: a storage timeout or 5xx, RocksDB busy or timed out,
    /// a commit whose outcome storage could not tell yet.
    Transient,
    /// An I/O or storage failure that retrying will not cure by itself (permissions, a
    /// storage error the client does not retry).
    Io,
    /// The operation is not available here (e.g. on the heap backend), or a format version
    /// is newer than this build understands.
    Unsupported,
    /// The backend (or the database under it) was closed: every state handle and clone of a
    /// closed backend answers with this. Open the path again for a new backend.
    Closed,
    /// An internal invariant failed: a bug in rockstate or RocksDB, never the caller's input.
    Internal,
}

/// Everything that can go wrong in rockstate. Match on [`Error::kind`] to decide what to do;
/// the variants carry the detail.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A key hashes to a key group this backend does not own.
    #[error("key group {key_group} is outside this backend's range [{range_start}, {range_end}]")]
    KeyGroupOutOfRange {
        /// The key's group.
        key_group: u16,
        /// The first key group the backend owns.
        range_start: u16,
        /// The last key group the backend owns (inclusive).
        range_end: u16,
    },
    /// A key-group range or parallelism setting is invalid.
    #[error("invalid key-group configuration: {0}")]
    InvalidKeyGroups(String),
    /// A value (or key, namespace, list element, map entry) exceeds the configured limit.
    #[error("{what} of {size} bytes exceeds the limit of {limit} bytes")]
    ValueTooLarge {
        /// Which part was too large.
        what: &'static str,
        /// Its size.
        size: usize,
        /// The configured limit.
        limit: usize,
    },
    /// A state was registered again (or restored) with different metadata.
    #[error("state `{name}` is registered as {existing} but was requested as {requested}")]
    StateMismatch {
        /// State name.
        name: String,
        /// What the backend already has.
        existing: String,
        /// What the caller asked for.
        requested: String,
    },
    /// A state name is empty or too long.
    #[error("invalid state name `{0}`")]
    InvalidStateName(String),
    /// A stored backend was opened with different settings than it was created with.
    #[error("backend at {path} was created with {existing}, opened with {requested}")]
    BackendMismatch {
        /// Database directory.
        path: PathBuf,
        /// Setting stored in the database.
        existing: String,
        /// Setting requested by the caller.
        requested: String,
    },
    /// Serialising a typed value failed.
    #[error("encoding {what} failed: {detail}")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// The codec's message.
        detail: String,
    },
    /// Stored bytes could not be decoded: corruption or a codec mismatch.
    #[error("decoding {what} failed: {detail}")]
    Decode {
        /// What was being decoded.
        what: &'static str,
        /// Why.
        detail: String,
    },
    /// A user-supplied configuration value is out of range.
    #[error("invalid option {name}: {detail}")]
    InvalidOption {
        /// Option name.
        name: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// RocksDB reported an error.
    #[error("rocksdb: {detail}")]
    RocksDb {
        /// RocksDB's status code, as a kind.
        kind: ErrorKind,
        /// RocksDB's message.
        detail: String,
    },
    /// An internal invariant failed (a bug, not the caller's input).
    #[error("internal error: {0}")]
    Internal(String),
    /// The backend at `path` was closed ([`crate::KeyedBackend::close`]); its state handles
    /// and clones no longer reach its database.
    #[error("backend at {path} is closed")]
    Closed {
        /// The backend's directory.
        path: PathBuf,
    },
    /// Filesystem error, with the path involved.
    #[error("i/o on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A checkpoint storage object that must be created fresh already exists (objects are
    /// never overwritten).
    #[error("checkpoint storage object `{name}` already exists")]
    ObjectExists {
        /// The object name under the storage root.
        name: String,
    },
    /// A checkpoint storage object does not exist.
    #[error("checkpoint storage object `{name}` not found")]
    ObjectNotFound {
        /// The object name under the storage root.
        name: String,
    },
    /// An object name is not a relative `/`-separated path of plain components.
    #[error("invalid checkpoint storage object name `{0}`")]
    InvalidObjectName(String),
    /// A checkpoint file in storage is missing, has the wrong size or checksum, is not a valid
    /// SST or manifest, or does not match what its manifest says.
    #[error("checkpoint file `{file}` is corrupt: {detail}")]
    CheckpointCorrupt {
        /// The object name (or local file name) of the bad file.
        file: String,
        /// What is wrong.
        detail: String,
    },
    /// No completed checkpoint matches a restore request.
    #[error("no checkpoint found: {0}")]
    CheckpointNotFound(String),
    /// Several completed checkpoints match a restore request; name one exactly.
    #[error("checkpoint {checkpoint_id} is ambiguous: backends {candidates:?} all match")]
    AmbiguousCheckpoint {
        /// The checkpoint id.
        checkpoint_id: u64,
        /// Backend ids with a matching manifest.
        candidates: Vec<String>,
    },
    /// A checkpoint operation was called on a backend without checkpoint storage.
    #[error("no checkpoint storage configured for this backend")]
    NoCheckpointStorage,
    /// A checkpoint id cannot be used now (not newer than the last completed one, or already
    /// in progress).
    #[error("checkpoint {id} rejected: {reason}")]
    CheckpointRejected {
        /// The checkpoint id.
        id: u64,
        /// Why.
        reason: String,
    },
    /// The checkpoint was aborted (by `notify_checkpoint_aborted`) before its upload ended;
    /// what it uploaded has been deleted.
    #[error("checkpoint {id} was aborted")]
    CheckpointAborted {
        /// The checkpoint id.
        id: u64,
    },
    /// A checkpoint this backend has not uploaded was confirmed.
    #[error("checkpoint {id} is unknown to this backend or not uploaded yet")]
    UnknownCheckpoint {
        /// The checkpoint id.
        id: u64,
    },
    /// A checkpoint's metadata does not match what the restoring builder asks for.
    #[error("checkpoint `{checkpoint}` has {existing}, restore requested {requested}")]
    RestoreMismatch {
        /// The manifest's object name.
        checkpoint: String,
        /// The checkpoint's setting.
        existing: String,
        /// The requested setting.
        requested: String,
    },
    /// A restored checkpoint holds state in a key group outside the range its manifest claims.
    #[error(
        "checkpoint `{checkpoint}` claims key groups [{claimed_start}, {claimed_end}] but state `{state}` has data in key group {key_group}"
    )]
    DataOutsideKeyGroups {
        /// The manifest's object name.
        checkpoint: String,
        /// The state (column family) holding the entry.
        state: String,
        /// The key group of the first entry found outside the claimed range.
        key_group: u16,
        /// The first key group the manifest claims.
        claimed_start: u16,
        /// The last key group the manifest claims (inclusive).
        claimed_end: u16,
    },
    /// The checkpoints merged by a rescaling restore disagree about a state's metadata.
    #[error("state `{name}` is {base_meta} in `{base}` but {other_meta} in `{other}`")]
    MergedStateMismatch {
        /// State name.
        name: String,
        /// The base manifest's object name.
        base: String,
        /// The state's metadata there.
        base_meta: String,
        /// The other manifest's object name.
        other: String,
        /// The state's metadata there.
        other_meta: String,
    },
    /// A restore target directory already holds files.
    #[error("restore target {0} is not empty")]
    RestoreTargetNotEmpty(PathBuf),
    /// The operation is not available on this kind of backend (e.g. checkpoints of the heap
    /// backend).
    #[error("not supported: {0}")]
    Unsupported(String),
    /// A checkpoint coordinator received a report it cannot accept (unknown task index,
    /// an acknowledgement for another checkpoint than it names), or was configured wrongly.
    #[error("checkpoint coordinator: {0}")]
    Coordinator(String),

    /// Checkpoint storage holds another job's or owner's checkpoints in a way that would make
    /// this one collide with them (`docs/ownership.md`).
    #[error("checkpoint storage conflict: {0}")]
    StorageConflict(String),

    /// Writing the job record of checkpoint `id` failed and storage could not say whether it
    /// landed: the checkpoint may be complete. Its tasks must keep it; `JobOwner::resolve`
    /// tells once storage answers.
    #[error("whether checkpoint {id} completed is unknown: {detail}")]
    CommitInDoubt {
        /// The checkpoint id.
        id: u64,
        /// What failed.
        detail: String,
    },

    /// The directory holds a restore that did not finish (its marker is still there): restore
    /// into it again, or remove it.
    #[error("{0} holds an unfinished restore; restore into it again or remove it")]
    RestoreIncomplete(PathBuf),
    /// A file fails its format checks: an SST's footer, blocks or properties, or the envelope
    /// of a manifest, job record or savepoint (magic, version, length, checksum).
    #[error("{detail}")]
    Format {
        /// [`ErrorKind::Unsupported`] for a format version or checksum type newer than this
        /// build, [`ErrorKind::Io`] when reading the file failed, else
        /// [`ErrorKind::Corruption`].
        kind: ErrorKind,
        /// What is wrong, and where.
        detail: String,
    },
    /// A checkpoint storage operation failed (network, server, or an injected fault), after
    /// the storage's own retries.
    #[error("checkpoint storage {operation} of `{name}` failed: {detail}")]
    Storage {
        /// The operation (`put`, `get`, `list`, `delete`, ...).
        operation: &'static str,
        /// The object name (or listing prefix).
        name: String,
        /// What went wrong.
        detail: String,
        /// Whether retrying the operation may succeed (timeouts, 5xx, connection errors,
        /// injected faults).
        transient: bool,
    },
    /// A checkpoint storage URL (or one of its options) is not understood.
    #[error("invalid checkpoint storage url `{url}`: {detail}")]
    InvalidStorageUrl {
        /// The URL as given.
        url: String,
        /// What is wrong.
        detail: String,
    },
}

impl Error {
    /// The kind of this failure.
    pub fn kind(&self) -> ErrorKind {
        use ErrorKind as K;
        match self {
            Error::KeyGroupOutOfRange { .. }
            | Error::InvalidKeyGroups(_)
            | Error::ValueTooLarge { .. }
            | Error::StateMismatch { .. }
            | Error::InvalidStateName(_)
            | Error::BackendMismatch { .. }
            | Error::Encode { .. }
            | Error::InvalidOption { .. }
            | Error::InvalidObjectName(_)
            | Error::NoCheckpointStorage
            | Error::RestoreMismatch { .. }
            | Error::Coordinator(_)
            | Error::InvalidStorageUrl { .. } => K::InvalidInput,
            Error::ObjectNotFound { .. }
            | Error::CheckpointNotFound(_)
            | Error::UnknownCheckpoint { .. } => K::NotFound,
            Error::Decode { .. }
            | Error::CheckpointCorrupt { .. }
            | Error::DataOutsideKeyGroups { .. }
            | Error::MergedStateMismatch { .. } => K::Corruption,
            Error::ObjectExists { .. }
            | Error::AmbiguousCheckpoint { .. }
            | Error::CheckpointRejected { .. }
            | Error::CheckpointAborted { .. }
            | Error::RestoreTargetNotEmpty(_)
            | Error::StorageConflict(_)
            | Error::RestoreIncomplete(_) => K::Conflict,
            Error::CommitInDoubt { .. } => K::Transient,
            Error::Unsupported(_) => K::Unsupported,
            Error::Internal(_) => K::Internal,
            Error::Closed { .. } => K::Closed,
            Error::RocksDb { kind, .. } => *kind,
            Error::Io { source, .. } => io_kind(source),
            Error::Storage { transient, .. } => {
                if *transient {
                    K::Transient
                } else {
                    K::Io
                }
            }
            Error::Format { kind, .. } => *kind,
        }
    }

    /// Whether retrying the failed operation may succeed ([`ErrorKind::Transient`]).
    pub fn is_transient(&self) -> bool {
        self.kind() == ErrorKind::Transient
    }

    /// The `sst-format` crate's error as rockstate's, sorted into its kind.
    pub(crate) fn format(e: sst_format::Error) -> Self {
        use sst_format::Error as F;
        let kind = match &e {
            F::Io(io) => io_kind(io),
            F::UnsupportedFormatVersion(_)
            | F::Unsupported(_)
            | F::UnknownManifestVersion(_)
            | F::UnknownVersion { .. }
            | F::UnknownChecksumType(_) => ErrorKind::Unsupported,
            _ => ErrorKind::Corruption,
        };
        Error::Format {
            kind,
            detail: e.to_string(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn decode(what: &'static str, detail: impl std::fmt::Display) -> Self {
        Error::Decode {
            what,
            detail: detail.to_string(),
        }
    }
}

/// The kind of an I/O error: missing files are [`ErrorKind::NotFound`], interruptions and
/// timeouts [`ErrorKind::Transient`], the rest [`ErrorKind::Io`].
fn io_kind(e: &std::io::Error) -> ErrorKind {
    use std::io::ErrorKind as I;
    match e.kind() {
        I::NotFound => ErrorKind::NotFound,
        I::AlreadyExists => ErrorKind::Conflict,
        I::InvalidInput => ErrorKind::InvalidInput,
        I::InvalidData | I::UnexpectedEof => ErrorKind::Corruption,
        I::Interrupted
        | I::TimedOut
        | I::WouldBlock
        | I::ConnectionReset
        | I::ConnectionAborted
        | I::ConnectionRefused
        | I::BrokenPipe => ErrorKind::Transient,
        I::Unsupported => ErrorKind::Unsupported,
        _ => ErrorKind::Io,
    }
}
