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
//! which must be consumed exactly.
//!
//! The same name can instead hold a *void record*: the owner of an abandoned checkpoint puts it
//! (create-if-absent, as every put) so that a late put of that checkpoint's record can never
//! land. It is 26 bytes:
//!
//! ```text
//! offset  size  field
//! 0       4     magic "RSJV"
//! 4       2     format version, u16 little-endian (VOID_RECORD_VERSION = 1)
//! 6       8     checkpoint id, u64 little-endian
//! 14      8     time the owner voided the name, ms since the Unix epoch (its clock), u64 LE
//! 22      4     CRC-32 (IEEE, crc32fast) of bytes 0..22, u32 little-endian
//! ```
//!
//! [`decode_job_record`] reads either by its magic. `docs/job-record-format.md` documents every
//! byte.

use serde::{Deserialize, Serialize};

use crate::coding::{fixed32, fixed64};
use crate::error::{Error, Result};
use crate::meta::OperatorListState;

/// First four bytes of every job record.
pub const JOB_RECORD_MAGIC: [u8; 4] = *b"RSJC";
/// The job record format version this build writes and reads.
pub const JOB_RECORD_VERSION: u16 = 1;
/// Bytes before the body: magic (4), version (2), body length (4).
pub const JOB_RECORD_HEADER_LEN: usize = 10;
/// First four bytes of a void job record.
pub const VOID_RECORD_MAGIC: [u8; 4] = *b"RSJV";
/// The void record format version this build writes and reads.
pub const VOID_RECORD_VERSION: u16 = 1;
/// Length of a void record: magic (4), version (2), checkpoint id (8), time (8), CRC-32 (4).
pub const VOID_RECORD_LEN: usize = 26;
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

/// The name of checkpoint `checkpoint_id`'s job record, taken by its owner after the checkpoint
/// was abandoned: a put of its record that lands later finds the name taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VoidRecord {
    /// The abandoned checkpoint's id.
    pub checkpoint_id: u64,
    /// Time the owner voided the name, ms since the Unix epoch (its clock).
    pub voided_at_ms: u64,
}

/// What a job record object holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobRecord {
    /// A completed checkpoint.
    Checkpoint(JobCheckpoint),
    /// An abandoned checkpoint's name, taken so that its record can never land.
    Void(VoidRecord),
}

impl JobRecord {
    /// The checkpoint id the record describes (its object name must say the same).
    pub fn checkpoint_id(&self) -> u64 {
        match self {
            JobRecord::Checkpoint(c) => c.checkpoint_id,
            JobRecord::Void(v) => v.checkpoint_id,
        }
    }
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

/// Encodes `void` as a complete void record file (version [`VOID_RECORD_VERSION`]).
pub fn encode_void_record(void: &VoidRecord) -> Vec<u8> {
    let mut out = Vec::with_capacity(VOID_RECORD_LEN);
    out.extend_from_slice(&VOID_RECORD_MAGIC);
    out.extend_from_slice(&VOID_RECORD_VERSION.to_le_bytes());
    out.extend_from_slice(&void.checkpoint_id.to_le_bytes());
    out.extend_from_slice(&void.voided_at_ms.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&out).to_le_bytes());
    out
}

/// Decodes a complete void record file. Errors: [`Error::BadMagic`], [`Error::UnknownVersion`],
/// [`Error::Truncated`], [`Error::Corrupt`] (bytes after the CRC), [`Error::RecordChecksum`].
pub fn decode_void_record(bytes: &[u8]) -> Result<VoidRecord> {
    let magic_len = bytes.len().min(VOID_RECORD_MAGIC.len());
    if bytes[..magic_len] != VOID_RECORD_MAGIC[..magic_len] {
        return Err(Error::BadMagic {
            what: "void job record",
            expected: VOID_RECORD_MAGIC.to_vec(),
            found: bytes[..magic_len].to_vec(),
        });
    }
    let truncated = Error::Truncated {
        what: "void job record",
        needed: VOID_RECORD_LEN as u64,
        available: bytes.len() as u64,
    };
    if bytes.len() < 6 {
        return Err(truncated);
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != VOID_RECORD_VERSION {
        return Err(Error::UnknownVersion {
            what: "void job record",
            version,
            supported: VOID_RECORD_VERSION,
        });
    }
    if bytes.len() < VOID_RECORD_LEN {
        return Err(truncated);
    }
    if bytes.len() > VOID_RECORD_LEN {
        return Err(Error::corrupt(format!(
            "{} bytes after the void job record CRC (expected {VOID_RECORD_LEN} bytes)",
            bytes.len() - VOID_RECORD_LEN
        )));
    }
    let field = |off| fixed64(bytes, off).ok_or_else(|| Error::corrupt("void job record field"));
    let checkpoint_id = field(6)?;
    let voided_at_ms = field(14)?;
    let stored = fixed32(bytes, 22).ok_or_else(|| Error::corrupt("void job record CRC"))?;
    let computed = crc32fast::hash(&bytes[..22]);
    if stored != computed {
        return Err(Error::RecordChecksum {
            what: "void job record",
            stored,
            computed,
        });
    }
    Ok(VoidRecord {
        checkpoint_id,
        voided_at_ms,
    })
}

/// Decodes a job record object: a completed checkpoint's record ([`decode_job_checkpoint`]) or
/// a void record ([`decode_void_record`]), told apart by their magic. Errors as theirs; a magic
/// of neither is [`Error::BadMagic`] naming the job record's.
pub fn decode_job_record(bytes: &[u8]) -> Result<JobRecord> {
    if bytes.starts_with(&VOID_RECORD_MAGIC) {
        decode_void_record(bytes).map(JobRecord::Void)
    } else {
        decode_job_checkpoint(bytes).map(JobRecord::Checkpoint)
    }
}
