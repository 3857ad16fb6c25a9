//! The changelog recorder. In changelog mode (`ChangelogOptions`) a backend's database
//! records here every change RocksDB takes from it, in the order it takes them: each put and
//! delete of every column family, with the write cache's writes recorded as they are drained
//! (so a key written many times between two drains is recorded once). A write made straight
//! through is recorded once RocksDB took it, so one RocksDB refuses is not; a drain records
//! its writes as it makes them, and one that fails keeps them cached and records them again
//! when it is made again. A checkpoint cuts what
//! was recorded since the last cut ([`ChangeLog::cut`]) into one changelog segment
//! (`sst_format::LogSegmentBuilder`, docs/changelog-format.md).
//!
//! Depends on `keygroup` only (for the key prefix); the database front calls it under its
//! lock, so the log's order is RocksDB's. Besides RocksDB's changes it holds the rows the
//! state layer cleared ([`ChangeLog::record_range`]: a range deletion that changes nothing in
//! RocksDB, whose own deletes of the entries found follow), so a replay also deletes the
//! entries a compaction filter dropped unrecorded. Changes the log cannot express (dropped
//! files, range deletions and ingestion, all made through `Open::changing`) and more recorded bytes
//! than its limit make the log *lost* until the next cut ([`LogCut::complete`] is false):
//! that checkpoint must be a materialization, which holds them.

use sst_format::LogSegmentBuilder;

use crate::keygroup;

/// What one database records between two checkpoints.
#[derive(Debug)]
pub(crate) struct ChangeLog {
    builder: LogSegmentBuilder,
    /// Sequence number of the builder's first entry.
    first_seq: u64,
    /// Where the last cut ended: equal to `first_seq` unless changes were lost since.
    cut_start: u64,
    /// The slot of the column family whose keys carry no key-group prefix (`default`).
    unkeyed_slot: Option<usize>,
    /// The max parallelism, which sets the key-group prefix of every other column family's
    /// keys.
    max_parallelism: u32,
    /// Smallest and largest key group recorded since the last cut.
    key_groups: Option<(u16, u16)>,
    /// Most bytes of encoded entries held; past it the log is lost until the next cut.
    max_bytes: usize,
    lost: bool,
}

/// What [`ChangeLog::cut`] hands over: the entries recorded since the previous cut.
#[derive(Debug)]
pub(crate) struct LogCut {
    /// Sequence number of the first entry.
    pub(crate) first_seq: u64,
    /// Sequence number after the last entry (`first_seq` plus the number of entries).
    pub(crate) end_seq: u64,
    /// The entries.
    pub(crate) builder: LogSegmentBuilder,
    /// Smallest and largest key group of the keyed entries.
    pub(crate) key_groups: Option<(u16, u16)>,
    /// Whether the entries are every change since the previous cut. When not, only a
    /// materialization cut together with this one holds those changes.
    pub(crate) complete: bool,
}

impl ChangeLog {
    /// A log whose first entry gets sequence number `first_seq`; keys of every column family
    /// but `unkeyed_slot` start with the key-group prefix of `max_parallelism`.
    pub(crate) fn new(
        first_seq: u64,
        unkeyed_slot: Option<usize>,
        max_parallelism: u32,
        max_bytes: usize,
    ) -> Self {
        ChangeLog {
            builder: LogSegmentBuilder::new(),
            first_seq,
            cut_start: first_seq,
            unkeyed_slot,
            max_parallelism,
            key_groups: None,
            max_bytes,
            lost: false,
        }
    }

    /// Records a put (`value` is `Some`) or a delete of `key` in the column family in `slot`.
    #[inline]
    pub(crate) fn record(&mut self, slot: usize, key: &[u8], value: Option<&[u8]>) {
        if self.lost {
            return;
        }
        let size = key.len() + value.map_or(0, <[u8]>::len) + 16;
        if self.builder.bytes() + size > self.max_bytes {
            self.lose();
            return;
        }
        // Slots are below `MAX_COLUMN_FAMILIES` (1024).
        let cf = slot as u32;
        match value {
            Some(v) => self.builder.put(cf, key, v),
            None => self.builder.delete(cf, key),
        }
        if Some(slot) != self.unkeyed_slot {
            self.note_group(key);
        }
    }

    /// Records that every key in `[start, end)` of the column family in `slot` is deleted,
    /// as of this point of the log: a replay deletes there whatever came before, also
    /// entries RocksDB dropped without a recorded change (the TTL compaction filter's). The
    /// state layer records one for each row (a key's list or map in one namespace) it clears
    /// by deleting the entries it finds.
    pub(crate) fn record_range(&mut self, slot: usize, start: &[u8], end: &[u8]) {
        if self.lost {
            return;
        }
        let size = start.len() + end.len() + 16;
        if self.builder.bytes() + size > self.max_bytes {
            self.lose();
            return;
        }
        // Slots are below `MAX_COLUMN_FAMILIES` (1024).
        self.builder.delete_range(slot as u32, start, end);
        if Some(slot) != self.unkeyed_slot {
            self.note_group(start);
        }
    }

    fn note_group(&mut self, key: &[u8]) {
        // A key shorter than its prefix is refused by the state layer; recorded as is, it
        // widens nothing.
        let Ok(group) = keygroup::read_prefix(key, self.max_parallelism) else {
            return;
        };
        self.key_groups = Some(match self.key_groups {
            None => (group, group),
            Some((lo, hi)) => (lo.min(group), hi.max(group)),
        });
    }

    /// Forgets what was recorded since the last cut: the next cut is incomplete, and the
    /// sequence numbers skip one, so no run of segments spans the loss.
    pub(crate) fn lose(&mut self) {
        if !self.lost {
            self.first_seq += self.builder.len() + 1;
        }
        self.lost = true;
        self.builder = LogSegmentBuilder::new();
        self.key_groups = None;
    }

    /// Hands over everything recorded since the last cut and starts afresh after it. A
    /// complete cut's entries are numbered from its `first_seq`; an incomplete one holds none.
    pub(crate) fn cut(&mut self) -> LogCut {
        let builder = std::mem::take(&mut self.builder);
        let end_seq = self.first_seq + builder.len();
        let first_seq = std::mem::replace(&mut self.cut_start, end_seq);
        self.first_seq = end_seq;
        let complete = !std::mem::replace(&mut self.lost, false);
        LogCut {
            first_seq,
            end_seq,
            builder,
            key_groups: self.key_groups.take(),
            complete,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_number_entries_contiguously_and_track_key_groups() {
        let mut log = ChangeLog::new(10, Some(0), 128, 1 << 20);
        log.record(1, &[5, b'a'], Some(b"v"));
        log.record(0, b"list-seq", Some(b"x"));
        log.record(2, &[9, b'b'], None);
        let c = log.cut();
        assert_eq!((c.first_seq, c.end_seq, c.complete), (10, 13, true));
        assert_eq!(c.key_groups, Some((5, 9)));
        log.record(1, &[7], Some(b""));
        let c = log.cut();
        assert_eq!(
            (c.first_seq, c.end_seq, c.key_groups),
            (13, 14, Some((7, 7)))
        );
        log.record_range(1, &[3, b'a'], &[3, b'b']);
        let c = log.cut();
        assert_eq!(
            (c.first_seq, c.end_seq, c.key_groups),
            (14, 15, Some((3, 3)))
        );
    }

    #[test]
    fn overflow_loses_until_the_next_cut() {
        let mut log = ChangeLog::new(0, Some(0), 32768, 64);
        log.record(1, &[0, 1, b'k'], Some(&[0; 100]));
        log.record(1, &[0, 1, b'k'], Some(b"small"));
        let c = log.cut();
        assert!(!c.complete && c.builder.is_empty());
        assert_eq!((c.first_seq, c.end_seq), (0, 1));
        log.record(1, &[0, 2, b'k'], Some(b"v"));
        let c = log.cut();
        assert!(c.complete);
        assert_eq!((c.first_seq, c.end_seq, c.key_groups), (1, 2, Some((2, 2))));
    }
}
