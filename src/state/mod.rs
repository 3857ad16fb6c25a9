//! State handles (docs/architecture.md §4–§5): Value, List, Map, Reducing and Aggregating,
//! each scoped by key and namespace. Each kind has one raw-bytes implementation (for engines
//! that serialize themselves) and a typed wrapper over serde that encodes with postcard and
//! calls it.
//!
//! `StateCore` is what every handle shares: the column family, the owning key-group range and
//! the limits, and the one place where keys are built and checked.

mod aggregating;
mod list;
mod map;
mod reducing;
mod value;

use std::sync::Arc;

use serde::Serialize;
use smallvec::SmallVec;

pub use aggregating::{AggregateFunction, AggregatingState};
pub(crate) use list::fold_heads as fold_list_heads;
pub(crate) use list::writes_heads as list_writes_heads;
pub use list::{ListState, RawListState};
pub use map::{MapState, RawMapState};
pub use reducing::ReducingState;
pub use value::{RawValueState, ValueState};

use crate::clock::Clock;
use crate::codec::{self, StoredKey};
use crate::error::{Error, Result};
use crate::keygroup::{self, KeyGroupRange};
use crate::store::{Table, TableBatch};
use crate::ttl::{self, TtlConfig, TtlCounters, UpdateType, Visibility};

/// What runs inside a read's visitor, which decides how the read's scan goes on when
/// RocksDB's iterator gives up next to many deleted entries ([`StateCore::scan_for_read`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Visitor {
    /// Code that only collects what it is handed (`get`, `entries`, `is_empty`).
    Reads,
    /// The caller's code, which may write the entries it is handed (a map iterated and
    /// updated through the same handle): an error after its writes landed would make a retry
    /// apply them twice.
    MayWrite,
}

/// A stored key under construction; keys up to 128 bytes never touch the heap.
pub(crate) type KeyBuf = SmallVec<[u8; 128]>;

pub use sst_format::{StateKind, StateMeta};

/// One line describing a state's metadata, for mismatch errors.
pub(crate) fn describe(meta: &StateMeta) -> String {
    format!(
        "{:?} codec={} v{} ttl={}",
        meta.kind, meta.codec, meta.codec_version, meta.ttl
    )
}

/// Identifies the serializer of a raw state, so a later registration with a different
/// serializer is refused instead of misreading bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecId {
    /// Serializer name.
    pub name: String,
    /// Serializer version.
    pub version: u32,
}

impl CodecId {
    /// A codec identity.
    pub fn new(name: impl Into<String>, version: u32) -> Self {
        CodecId {
            name: name.into(),
            version,
        }
    }

    /// The identity of rockstate's typed (postcard) codec for the given type names.
    pub(crate) fn postcard(types: &[&str]) -> Self {
        CodecId::new(format!("postcard;{}", types.join(";")), 1)
    }
}

/// One raw entry of a state, as visited by key-group scans (savepoints, rescaling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawEntry<'a> {
    /// Key group of the key.
    pub key_group: u16,
    /// Serialized key.
    pub key: &'a [u8],
    /// Serialized namespace.
    pub namespace: &'a [u8],
    /// Map user key; for a list entry its sequence number (8 bytes BE), followed by `0x01`
    /// when the entry holds a run of elements (each framed by its varint length) rather than
    /// one element; empty for other kinds.
    pub suffix: &'a [u8],
    /// Stored value bytes.
    pub value: &'a [u8],
}

/// Name and options of a state to register. `&str` converts into a descriptor without TTL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDescriptor {
    /// Unique state name within the backend.
    pub name: String,
    /// Time-to-live; `None` keeps entries forever.
    pub ttl: Option<TtlConfig>,
}

impl StateDescriptor {
    /// A descriptor without TTL.
    pub fn new(name: impl Into<String>) -> Self {
        StateDescriptor {
            name: name.into(),
            ttl: None,
        }
    }

    /// Adds a time-to-live.
    pub fn with_ttl(mut self, ttl: TtlConfig) -> Self {
        self.ttl = Some(ttl);
        self
    }
}

impl From<&str> for StateDescriptor {
    fn from(name: &str) -> Self {
        StateDescriptor::new(name)
    }
}

/// TTL settings of one registered state, resolved against its clock.
pub(crate) struct TtlRuntime {
    pub(crate) config: TtlConfig,
    pub(crate) ttl_ms: u64,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) counters: Arc<TtlCounters>,
    /// Where a list state's timestamps come from: never below one handed out before
    /// (`crate::meta::StampFloor`). `None`: the clock's time as it is.
    pub(crate) floor: Option<Arc<crate::meta::StampFloor>>,
}

impl TtlRuntime {
    /// The timestamp of an entry written now.
    #[inline]
    pub(crate) fn stamp_ms(&self) -> Result<u64> {
        match &self.floor {
            Some(floor) => floor.next(),
            None => Ok(self.clock.now_ms()),
        }
    }
}

/// How a stored entry reads under TTL.
enum Found<'a> {
    /// Return the payload.
    Live(&'a [u8]),
    /// Return the payload and rewrite it with a fresh timestamp (OnReadAndWrite).
    LiveRefresh(&'a [u8]),
    /// Expired and hidden: remove it (cleanup on read).
    ExpiredHidden,
}

/// What every handle of one state shares.
pub(crate) struct StateCore {
    pub(crate) table: Table,
    pub(crate) meta: StateMeta,
    pub(crate) key_groups: KeyGroupRange,
    pub(crate) max_parallelism: u32,
    pub(crate) max_value_bytes: usize,
    pub(crate) list_seq: Arc<crate::meta::SequenceAllocator>,
    pub(crate) ttl: Option<TtlRuntime>,
    /// Heap incremental TTL cleanup, when configured (only with TTL on a heap backend).
    pub(crate) incremental: Option<IncrementalCleanup>,
    /// A list state whose `update` is blind, writing a head (`state::list::writes_heads`).
    pub(crate) list_heads: bool,
}

/// Incremental TTL cleanup (heap backend): each access examines the next `entries` entries
/// after `cursor`, wrapping around at the end of the state.
pub(crate) struct IncrementalCleanup {
    entries: usize,
    cursor: parking_lot::Mutex<Vec<u8>>,
}

impl IncrementalCleanup {
    pub(crate) fn new(entries: usize) -> Self {
        IncrementalCleanup {
            entries,
            cursor: parking_lot::Mutex::new(Vec::new()),
        }
    }
}

/// A stored value under construction (timestamp + payload); small ones stay on the stack.
pub(crate) type ValueBuf = SmallVec<[u8; 256]>;

/// Keys and namespaces together may not exceed this (RocksDB keys live in index blocks).
pub const MAX_KEY_BYTES: usize = 1 << 20;

impl StateCore {
    /// Builds `[kg][key][ns]` after checking the key's group and sizes.
    #[inline]
    pub(crate) fn key(&self, key: &[u8], ns: &[u8]) -> Result<KeyBuf> {
        if key.len() + ns.len() > MAX_KEY_BYTES {
            return Err(Error::ValueTooLarge {
                what: "key and namespace",
                size: key.len() + ns.len(),
                limit: MAX_KEY_BYTES,
            });
        }
        let key_group = keygroup::key_group_of(key, self.max_parallelism);
        if !self.key_groups.contains(key_group) {
            return Err(Error::KeyGroupOutOfRange {
                key_group,
                range_start: self.key_groups.start,
                range_end: self.key_groups.end,
            });
        }
        let mut out = KeyBuf::new();
        codec::write_key_prefix(&mut out, key_group, self.max_parallelism, key, ns);
        Ok(out)
    }

    /// Checks a value (or element, entry, accumulator) against the size limit.
    #[inline]
    pub(crate) fn check_value(&self, what: &'static str, value: &[u8]) -> Result<()> {
        if value.len() > self.max_value_bytes {
            return Err(Error::ValueTooLarge {
                what,
                size: value.len(),
                limit: self.max_value_bytes,
            });
        }
        Ok(())
    }

    /// How `stored` reads now: TTL expiry, visibility and refresh applied.
    #[inline]
    fn classify<'a>(&self, stored: &'a [u8]) -> Result<Found<'a>> {
        let Some(t) = &self.ttl else {
            return Ok(Found::Live(stored));
        };
        let (ts, payload) = ttl::split_stored(stored)?;
        Ok(match t.config.update_type {
            UpdateType::Disabled => Found::Live(payload),
            _ if ttl::is_expired(ts, t.ttl_ms, t.clock.now_ms()) => match t.config.visibility {
                Visibility::NeverReturnExpired => Found::ExpiredHidden,
                Visibility::ReturnExpiredIfNotCleanedUp => Found::Live(payload),
            },
            UpdateType::OnReadAndWrite => Found::LiveRefresh(payload),
            UpdateType::OnCreateAndWrite => Found::Live(payload),
        })
    }

    /// The bytes to store for `payload`: itself, or prefixed with the current timestamp.
    #[inline]
    pub(crate) fn stamp(&self, payload: &[u8]) -> Result<ValueBuf> {
        let mut out = ValueBuf::new();
        if let Some(t) = &self.ttl {
            out.extend_from_slice(&t.stamp_ms()?.to_be_bytes());
        }
        out.extend_from_slice(payload);
        Ok(out)
    }

    /// Stores `payload` under the full key `k`.
    #[inline]
    pub(crate) fn put_payload(&self, k: &[u8], payload: &[u8]) -> Result<()> {
        self.put_payload_at(k, self.write_stamp()?, payload)
    }

    /// The TTL timestamp of a write made now, `None` without TTL. A list entry takes it
    /// before its sequence number, a head after its own
    /// (docs/decisions/0045-blind-ttl-list-updates.md).
    #[inline]
    pub(crate) fn write_stamp(&self) -> Result<Option<u64>> {
        self.ttl.as_ref().map(TtlRuntime::stamp_ms).transpose()
    }

    /// Stores `payload` under the full key `k` with `stamp` from [`StateCore::write_stamp`].
    #[inline]
    pub(crate) fn put_payload_at(
        &self,
        k: &[u8],
        stamp: Option<u64>,
        payload: &[u8],
    ) -> Result<()> {
        let Some(stamp) = stamp else {
            return self.table.put(k, payload);
        };
        // The timestamp and the payload go down apart: the write cache copies both into
        // place, where joining them here would copy the payload once more (a tenth of a 1 KiB
        // insert's time in `rockstate-bench ops --value-bytes 1024 --ttl`).
        self.table.put_parts(k, &stamp.to_be_bytes(), payload)?;
        self.cleanup_incrementally()
    }

    /// Deletes the entry under `k` (a value's `clear`, a map's `remove`), then takes this
    /// state's incremental cleanup step: a delete is a state access as much as a write.
    pub(crate) fn delete_entry(&self, k: &[u8]) -> Result<()> {
        self.table.delete(k)?;
        self.cleanup_incrementally()
    }

    /// One step of incremental TTL cleanup: examines the next entries after the cursor and
    /// removes the expired ones, under the table's lock (a value another thread writes
    /// meanwhile is never removed unexamined). Skipped when another thread is doing a step of
    /// this state. Heap backend only (RocksDB's compaction filter does this work).
    fn cleanup_incrementally(&self) -> Result<()> {
        let (Some(inc), Some(t), Table::Heap(heap)) = (&self.incremental, &self.ttl, &self.table)
        else {
            return Ok(());
        };
        let Some(mut cursor) = inc.cursor.try_lock() else {
            return Ok(());
        };
        let now = t.clock.now_ms();
        let (dropped, last) = heap.remove_some(&cursor, inc.entries, |v| {
            ttl::stored_is_expired(v, t.ttl_ms, now)
        })?;
        // Resume right after the last key examined; at the end of the state, start over.
        *cursor = match last {
            Some(k) => {
                let mut next = k.to_vec();
                next.push(0);
                next
            }
            None => Vec::new(),
        };
        t.counters
            .dropped_incrementally
            .fetch_add(dropped as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Adds a put of `payload` under the full key `k` to `batch`, with `stamp` from
    /// [`StateCore::write_stamp`].
    pub(crate) fn batch_put_payload_at(
        batch: &mut TableBatch,
        k: &[u8],
        stamp: Option<u64>,
        payload: &[u8],
    ) {
        match stamp {
            None => batch.put(k, payload),
            Some(stamp) => {
                let mut stored = ValueBuf::new();
                stored.extend_from_slice(&stamp.to_be_bytes());
                stored.extend_from_slice(payload);
                batch.put(k, &stored);
            }
        }
    }

    fn count_dropped_on_read(&self, n: u64) {
        if let Some(t) = &self.ttl {
            t.counters
                .dropped_on_read
                .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The payload of `stored` (the value under full key `k`) if it reads as live, after
    /// writing what reading it does under TTL: an `OnReadAndWrite` refresh, or the removal of
    /// an expired entry (counted), `None` then.
    #[inline]
    pub(crate) fn read_live<'a>(&self, k: &[u8], stored: &'a [u8]) -> Result<Option<&'a [u8]>> {
        Ok(match self.classify(stored)? {
            Found::Live(p) => Some(p),
            Found::LiveRefresh(p) => {
                self.table.put(k, &self.stamp(p)?)?;
                Some(p)
            }
            Found::ExpiredHidden => {
                if self.table.delete_expired(k, stored)? {
                    self.count_dropped_on_read(1);
                }
                None
            }
        })
    }

    /// Reads the entry at full key `k` through `f`, applying TTL (cleanup on read, refresh).
    #[inline]
    pub(crate) fn read_entry<R>(
        &self,
        k: &[u8],
        f: impl FnOnce(&[u8]) -> Result<R>,
    ) -> Result<Option<R>> {
        if self.ttl.is_none() {
            return self.table.get_with(k, f)?.transpose();
        }
        // The side effects of the read (the refresh, the cleanup) are written before `f` runs,
        // so a write `f` makes to this key comes after them and stays. The refreshed value is
        // stamped inside the read, on the stack for small values.
        let out = self
            .table
            .get_with(k, |stored| -> Result<Option<R>> {
                self.read_live(k, stored)?.map(f).transpose()
            })?
            .transpose()?
            .flatten();
        self.cleanup_incrementally()?;
        Ok(out)
    }

    /// Visits the live entries under `prefix` (a key's list or map in one namespace) in key
    /// order as `(suffix, payload)`, applying TTL: an expired entry is skipped and removed, a
    /// refreshed one rewritten, each as the scan meets it and before `f` sees the next entry
    /// (or, when refreshed, this one), so a write `f` makes to an entry of the scan comes after
    /// them and stays.
    pub(crate) fn scan_prefix(
        &self,
        prefix: &[u8],
        visitor: Visitor,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let end = codec::prefix_end(prefix);
        if self.ttl.is_none() {
            return self.scan_for_read(prefix, end.as_deref(), visitor, |k, v| {
                f(&k[prefix.len()..], v)
            });
        }
        self.scan_for_read(prefix, end.as_deref(), visitor, |k, v| {
            match self.read_live(k, v)? {
                Some(p) => f(&k[prefix.len()..], p),
                None => Ok(true),
            }
        })?;
        // A list or map read is a state access too, as in Flink's incremental cleanup.
        self.cleanup_incrementally()
    }

    /// Visits the stored entries in `[lower, upper)` for a read. A read that writes (under
    /// TTL it may refresh or remove the entries it meets, [`StateCore::read_live`]; a
    /// [`Visitor::MayWrite`] runs the caller's code) scans with [`Table::scan_writing_back`],
    /// which goes on past a give-up next to deleted entries; a read of a state without TTL
    /// whose visitor only reads scans with [`Table::scan`], which reads the range again there
    /// and fails with a transient error if it changed, so a reader on another thread never
    /// sees part of a write.
    pub(crate) fn scan_for_read(
        &self,
        lower: &[u8],
        upper: Option<&[u8]>,
        visitor: Visitor,
        f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        match (&self.ttl, visitor) {
            (None, Visitor::Reads) => self.table.scan(lower, upper, f),
            _ => self.table.scan_writing_back(lower, upper, f),
        }
    }

    /// In changelog mode, records that the row under `prefix` (a key's list or map in one
    /// namespace) is cleared as of now, before the deletes of the entries the caller finds: a
    /// TTL state's compaction filter drops expired entries without a logged change, and a
    /// replay onto a materialization that still holds one would otherwise bring it back
    /// (visible once a restore raises the TTL, switches the visibility, or runs on a clock
    /// behind). States without TTL lose no entry unlogged and record nothing.
    pub(crate) fn log_row_cleared(&self, prefix: &[u8]) -> Result<()> {
        if self.ttl.is_none() {
            return Ok(());
        }
        // A row prefix ends in a namespace length's varint, whose last byte is below 0x80,
        // after which only namespace bytes follow: it is never all 0xFF, so it has an end.
        let end = codec::prefix_end(prefix)
            .ok_or_else(|| Error::Internal("a row prefix without an end".into()))?;
        self.table.log_range_deletion(prefix, &end)
    }

    /// Deletes every entry under `prefix` (a key's list or map in one namespace).
    pub(crate) fn clear_prefix(&self, prefix: &[u8]) -> Result<()> {
        self.log_row_cleared(prefix)?;
        let mut batch = self.table.batch();
        self.table
            .scan(prefix, codec::prefix_end(prefix).as_deref(), |k, _| {
                batch.delete(k);
                Ok(true)
            })?;
        if batch.len() > 0 {
            batch.commit()?;
        }
        self.cleanup_incrementally()
    }

    /// Visits every stored entry of key group `key_group` in key order (values as stored: with
    /// their TTL timestamp when the state has TTL).
    pub(crate) fn scan_key_group(
        &self,
        key_group: u16,
        f: impl FnMut(RawEntry<'_>) -> Result<bool>,
    ) -> Result<()> {
        // A group beyond the job's would be scanned under a prefix that is not its own (one
        // byte holds groups below 256 only): another group's entries.
        if u32::from(key_group) >= self.max_parallelism {
            return Err(Error::InvalidKeyGroups(format!(
                "key group {key_group} of a job with max parallelism {}",
                self.max_parallelism
            )));
        }
        // A group another instance owns: an empty answer would read as an owned, empty one.
        if !self.key_groups.contains(key_group) {
            return Err(Error::KeyGroupOutOfRange {
                key_group,
                range_start: self.key_groups.start,
                range_end: self.key_groups.end,
            });
        }
        scan_key_group(&self.table, self.max_parallelism, key_group, f)
    }
}

/// Visits every stored entry of key group `key_group` in `table` in key order.
pub(crate) fn scan_key_group(
    table: &Table,
    max_parallelism: u32,
    key_group: u16,
    f: impl FnMut(RawEntry<'_>) -> Result<bool>,
) -> Result<()> {
    scan_key_groups(table, max_parallelism, key_group, key_group, f)
}

/// Visits every stored entry of the key groups `first..=last` in `table` in key order (so
/// ascending key group), with one sequential scan (see [`Table::scan_bulk`]).
pub(crate) fn scan_key_groups(
    table: &Table,
    max_parallelism: u32,
    first: u16,
    last: u16,
    mut f: impl FnMut(RawEntry<'_>) -> Result<bool>,
) -> Result<()> {
    let (lower, upper) = key_group_bounds(max_parallelism, first, last);
    table.scan_bulk(&lower, upper.as_deref(), |k, v| {
        f(raw_entry(k, v, max_parallelism)?)
    })
}

/// The stored-key bounds of key groups `first..=last`: the first group's prefix (inclusive)
/// and the end of the last one's (exclusive; `None` past the last possible key).
pub(crate) fn key_group_bounds(
    max_parallelism: u32,
    first: u16,
    last: u16,
) -> (Vec<u8>, Option<Vec<u8>>) {
    let mut lower = Vec::new();
    keygroup::write_prefix(&mut lower, first, max_parallelism);
    let mut last_prefix = Vec::new();
    keygroup::write_prefix(&mut last_prefix, last, max_parallelism);
    (lower, codec::prefix_end(&last_prefix))
}

/// A stored entry (`key`, `value`) split into its parts.
pub(crate) fn raw_entry<'a>(
    key: &'a [u8],
    value: &'a [u8],
    max_parallelism: u32,
) -> Result<RawEntry<'a>> {
    let StoredKey {
        key_group,
        key,
        namespace,
        suffix,
    } = codec::split_key(key, max_parallelism)?;
    Ok(RawEntry {
        key_group,
        key,
        namespace,
        suffix,
        value,
    })
}

/// Serializes `value` with postcard into a stack buffer (heap only when larger) and calls `f`.
#[inline]
pub(crate) fn with_encoded<T: Serialize + ?Sized, R>(
    value: &T,
    what: &'static str,
    f: impl FnOnce(&[u8]) -> Result<R>,
) -> Result<R> {
    let mut stack = [0u8; 256];
    match postcard::to_slice(value, &mut stack) {
        Ok(bytes) => f(bytes),
        Err(postcard::Error::SerializeBufferFull) => f(&codec::encode(value, what)?),
        Err(e) => Err(Error::Encode {
            what,
            detail: e.to_string(),
        }),
    }
}

/// A state name must be non-empty and at most [`crate::meta::MAX_STATE_NAME`] bytes.
pub(crate) fn check_state_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > crate::meta::MAX_STATE_NAME {
        return Err(Error::InvalidStateName(name.to_string()));
    }
    Ok(())
}

/// Whether a registration described by `requested` may open the state stored as `existing`:
/// the same name, kind, TTL flag, codec version and codec name, where the names of
/// rockstate's typed codec (`postcard;<K>;<N>;<V>…`, from `std::any::type_name`) are compared
/// without their module paths. Rust does not promise `type_name` stable across compiler
/// versions, and a key type moved to another module or crate keeps its postcard bytes: a
/// restore must not be refused for either. A value type that changed (`u64` for `i64`,
/// `Vec<u16>` for `Vec<u8>`) is still refused.
pub(crate) fn same_state(existing: &StateMeta, requested: &StateMeta) -> bool {
    const TYPED: &str = "postcard;";
    let codecs_match = match (
        existing.codec.strip_prefix(TYPED),
        requested.codec.strip_prefix(TYPED),
    ) {
        (Some(a), Some(b)) => without_paths(a) == without_paths(b),
        _ => existing.codec == requested.codec,
    };
    codecs_match
        && existing.name == requested.name
        && existing.kind == requested.kind
        && existing.codec_version == requested.codec_version
        && existing.ttl == requested.ttl
}

/// `type_name` output without module paths: `alloc::vec::Vec<my::Key>` is `Vec<Key>`.
fn without_paths(types: &str) -> String {
    let mut out = String::with_capacity(types.len());
    // Where the path being read starts in `out`: a `::` drops what lies after it.
    let mut path_start = 0;
    let mut chars = types.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            out.truncate(path_start);
        } else {
            out.push(c);
            if !(c.is_alphanumeric() || c == '_') {
                path_start = out.len();
            }
        }
    }
    out
}

pub(crate) fn mismatch_error(existing: &StateMeta, requested: &StateMeta) -> Error {
    Error::StateMismatch {
        name: requested.name.clone(),
        existing: describe(existing),
        requested: describe(requested),
    }
}

#[cfg(test)]
mod tests {
    use super::without_paths;

    #[test]
    fn type_names_lose_their_module_paths_only() {
        for (name, bare) in [
            ("u64", "u64"),
            ("alloc::string::String", "String"),
            (
                "core::option::Option<alloc::vec::Vec<my_job::model::Key>>",
                "Option<Vec<Key>>",
            ),
            ("(u32, alloc::string::String)", "(u32, String)"),
            ("[a::B; 4]", "[B; 4]"),
            ("&'static str", "&'static str"),
            (
                "std::collections::hash::map::HashMap<u8, x::Y>",
                "HashMap<u8, Y>",
            ),
            ("postcard;a::K;();b::V", "postcard;K;();V"),
        ] {
            assert_eq!(without_paths(name), bare, "{name}");
        }
    }
}
