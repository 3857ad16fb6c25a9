//! The job-level checkpoint record codec: the file a checkpoint coordinator writes when every
//! task of a job acknowledged checkpoint N, listing which task snapshots belong to it.
//!
//! This module owns the byte layout of `job/chk-<id>`:
//!
//! ```text
//! offset  size  field
//! 0       4     magic "RSJC"
//! 4       2     format version, u16 little-endian (JOB_RECORD_VERSION = 1)
//! 6       4     body length N, u32 little-endian
//! 10      N     body = postcard(JobCheckpoint), uncompressed
//! 10+N    4     CRC-32 (IEEE, crc32fast) of the N body bytes, u32 little-endian
//! ```
//!
//! The decoder checks, in order: magic, version, header length, total length (exactly
//! `14 + N`), the body length limit [`MAX_JOB_RECORD_BODY_BYTES`], CRC, then decodes the body,
//! which must be consumed exactly. `docs/job-record-format.md` documents every byte.

use serde::{Deserialize, Serialize};

use crate::coding::fixed32;
use crate::error::{Error, Result};
use crate::meta::OperatorListState;

/// First four bytes of every job record.
pub const JOB_RECORD_MAGIC: [u8; 4] = *b"RSJC";
/// The job record format version this build writes and reads.
pub const JOB_RECORD_VERSION: u16 = 1;
/// Bytes before the body: magic (4), version (2), body length (4).
pub const JOB_RECORD_HEADER_LEN: usize = 10;
/// Bytes after the body: the CRC-32.
pub const JOB_RECORD_TRAILER_LEN: usize = 4;
/// Largest accepted body. A record lists one entry per task; 64 MiB leaves room for large
/// operator states while refusing absurd length fields.
pub const MAX_JOB_RECORD_BODY_BYTES: u32 = 64 << 20;

/// Checkpoint N of a whole job: which task snapshot belongs to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobCheckpoint {
    /// The checkpoint id.
    pub checkpoint_id: u64,
    /// Free-form job name given to the coordinator.
    pub job_name: String,
    /// Number of key groups of the job (0 when no task has keyed state).
    pub max_parallelism: u32,
    /// Time the coordinator triggered the checkpoint, ms since the Unix epoch (its clock).
    pub triggered_at_ms: u64,
    /// Time every acknowledgement had arrived, ms since the Unix epoch (its clock).
    pub completed_at_ms: u64,
    /// One entry per task, ascending by `task`.
    pub tasks: Vec<TaskCheckpoint>,
}

/// One task's part of a job checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskCheckpoint {
    /// Task index, 0-based, unique in the job.
    pub task: u32,
    /// Object name of the task's keyed-state manifest (`chk-<id>/<backend>/_metadata`);
    /// `None` for a task without keyed state.
    pub manifest: Option<String>,
    /// First key group of the task (inclusive); 0 without keyed state.
    pub key_group_start: u16,
    /// Last key group of the task (inclusive); 0 without keyed state.
    pub key_group_end: u16,
    /// The task's operator state (e.g. source read offsets) as of this checkpoint.
    pub operator_state: Vec<OperatorListState>,
    /// Full keyed-state size the manifest references, bytes.
    pub state_bytes: u64,
    /// Bytes the task uploaded for this checkpoint.
    pub bytes_uploaded: u64,
    /// SSTs reused from the previous checkpoint.
    pub files_reused: u64,
    /// Sync phase duration, microseconds.
    pub sync_micros: u64,
    /// Async phase duration, microseconds.
    pub async_micros: u64,
}

/// Encodes `record` as a complete job record file (version [`JOB_RECORD_VERSION`]).
/// Deterministic.
pub fn encode_job_checkpoint(record: &JobCheckpoint) -> Result<Vec<u8>> {
    let body = postcard::to_stdvec(record).map_err(Error::Encode)?;
    let body_len = u32::try_from(body.len())
        .ok()
        .filter(|n| *n <= MAX_JOB_RECORD_BODY_BYTES)
        .ok_or(Error::TooLarge {
            what: "job record body",
            size: body.len() as u64,
            limit: u64::from(MAX_JOB_RECORD_BODY_BYTES),
        })?;
    let mut out = Vec::with_capacity(JOB_RECORD_HEADER_LEN + body.len() + JOB_RECORD_TRAILER_LEN);
    out.extend_from_slice(&JOB_RECORD_MAGIC);
    out.extend_from_slice(&JOB_RECORD_VERSION.to_le_bytes());
    out.extend_from_slice(&body_len.to_le_bytes());
    out.extend_from_slice(&body);
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    Ok(out)
}

/// Decodes a complete job record file. Errors: [`Error::BadMagic`], [`Error::UnknownVersion`],
/// [`Error::Truncated`], [`Error::Corrupt`] (bytes after the CRC), [`Error::TooLarge`],
/// [`Error::RecordChecksum`], [`Error::Decode`].
pub fn decode_job_checkpoint(bytes: &[u8]) -> Result<JobCheckpoint> {
    let magic_len = bytes.len().min(JOB_RECORD_MAGIC.len());
    if bytes[..magic_len] != JOB_RECORD_MAGIC[..magic_len] {
        return Err(Error::BadMagic {
            what: "job record",
            expected: JOB_RECORD_MAGIC.to_vec(),
            found: bytes[..magic_len].to_vec(),
        });
    }
    let truncated = |what| Error::Truncated {
        what,
        needed: JOB_RECORD_HEADER_LEN as u64,
        available: bytes.len() as u64,
    };
    if bytes.len() < 6 {
        return Err(truncated("job record header"));
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != JOB_RECORD_VERSION {
        return Err(Error::UnknownVersion {
            what: "job record",
            version,
            supported: JOB_RECORD_VERSION,
        });
    }
    let body_len = fixed32(bytes, 6).ok_or_else(|| truncated("job record header"))?;
    if body_len > MAX_JOB_RECORD_BODY_BYTES {
        return Err(Error::TooLarge {
            what: "job record body",
            size: u64::from(body_len),
            limit: u64::from(MAX_JOB_RECORD_BODY_BYTES),
        });
    }
    let total = JOB_RECORD_HEADER_LEN as u64 + u64::from(body_len) + JOB_RECORD_TRAILER_LEN as u64;
    if (bytes.len() as u64) < total {
        return Err(Error::Truncated {
            what: "job record body",
            needed: total,
            available: bytes.len() as u64,
        });
    }
    if (bytes.len() as u64) > total {
        return Err(Error::corrupt(format!(
            "{} bytes after the job record CRC (expected {total} bytes in total)",
            bytes.len() as u64 - total
        )));
    }
    // total == bytes.len(), so these ranges are in bounds.
    let body_end = bytes.len() - JOB_RECORD_TRAILER_LEN;
    let body = &bytes[JOB_RECORD_HEADER_LEN..body_end];
    let stored = fixed32(bytes, body_end).ok_or_else(|| Error::corrupt("job record CRC"))?;
    let computed = crc32fast::hash(body);
    if stored != computed {
        return Err(Error::RecordChecksum {
            what: "job record",
            stored,
            computed,
        });
    }
    let (record, rest) = postcard::take_from_bytes::<JobCheckpoint>(body).map_err(Error::Decode)?;
    if !rest.is_empty() {
        return Err(Error::Decode(postcard::Error::DeserializeBadEncoding));
    }
    Ok(record)
}
