//! Background jobs held off while files are ingested.
//!
//! RocksDB's ingestion (11.8) picks the levels it checks for overlap from a column family's
//! current version, and reads those levels through the column family's super version
//! (`ExternalSstFileIngestionJob::AssignLevelAndSeqnoForIngestedFile`). The two differ while
//! a flush or compaction whose result another job's manifest write applied (a parallel
//! ingestion's, another column family's compaction) waits for the database mutex to install
//! its super version. When that result opened a level below every other one (a first
//! compaction from level 0 to the last level), the ingestion indexed past the super
//! version's levels and the process died of SIGSEGV in `Version::OverlapWithLevelIterator`
//! (`tests/changelog_ttl_restores_match_model.rs` met it in about one run in seven). Where
//! the memory read did not fault, the overlap check read garbage.
//!
//! So no flush or compaction finishes while files are ingested ([`Quiet::hold`],
//! [`Held::settle`]):
//! - the manual flushes and compactions this crate starts hold [`Quiet::job`], which an
//!   ingestion takes exclusively;
//! - automatic compactions are off on every column family for the ingestion
//!   (`disable_auto_compactions`), and the ingestion waits for the jobs already scheduled or
//!   running (RocksDB's `WaitForCompact`);
//! - writes start no flush: the ingestion holds the front's lock (`Open::changing`), and the
//!   targets' memtables are flushed before the wait, so RocksDB's own flush inside the
//!   ingestion never runs.
//!
//! Turning compactions off and on is an options change per column family, and RocksDB
//! rewrites its OPTIONS file for each (1.5–2 ms here). A restore ingests many times, so its
//! databases open with compactions already off and turn them on once it is done
//! ([`Quiet::resume`], from `Db::after_restore`).

use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::{rocks_error, Handle, Rocks};
use crate::error::Result;

/// The hold on background jobs of one database.
pub(super) struct Quiet {
    /// Held shared by manual flushes and compactions, exclusively by an ingestion.
    jobs: RwLock<()>,
    /// Whether automatic compactions are off on every column family until the restore that
    /// opened the database is done. Held across a column family's creation and across a hold.
    restoring: Mutex<bool>,
}

/// Background jobs held off until dropped or [`Held::release`]d.
pub(super) struct Held<'a> {
    rocks: &'a Rocks,
    handles: Vec<&'a Handle>,
    /// Whether this hold turned compactions off (and turns them back on).
    turned_off: bool,
    _restoring: MutexGuard<'a, bool>,
    _jobs: RwLockWriteGuard<'a, ()>,
}

impl Quiet {
    /// No hold; with `restoring`, the database was opened with compactions off until
    /// [`Quiet::resume`].
    pub(super) fn new(restoring: bool) -> Self {
        Quiet {
            jobs: RwLock::new(()),
            restoring: Mutex::new(restoring),
        }
    }

    /// Held by a manual flush or compaction for its whole length: none runs during an
    /// ingestion. Take it before the front's lock (an ingestion takes it first too).
    pub(super) fn job(&self) -> RwLockReadGuard<'_, ()> {
        self.jobs.read()
    }

    /// Held across the creation of a column family: `true` when it must be created with
    /// automatic compactions off.
    pub(super) fn creating(&self) -> MutexGuard<'_, bool> {
        self.restoring.lock()
    }

    /// Holds every flush and compaction of `rocks` off: manual ones wait, and automatic
    /// compactions are turned off on every column family (`handles`). Then
    /// [`Held::settle`] waits for the jobs already under way. Take it before the front's
    /// lock.
    pub(super) fn hold<'a>(
        &'a self,
        rocks: &'a Rocks,
        handles: Vec<&'a Handle>,
    ) -> Result<Held<'a>> {
        let jobs = self.jobs.write();
        let restoring = self.restoring.lock();
        let turn_off = !*restoring;
        let mut held = Held {
            rocks,
            handles,
            turned_off: false,
            _restoring: restoring,
            _jobs: jobs,
        };
        if turn_off {
            // Set before the first change, so that an error turns back on what it turned off.
            held.turned_off = true;
            auto_compactions(rocks, &held.handles, false)?;
        }
        Ok(held)
    }

    /// Turns automatic compactions on for every column family (`handles`) if the database
    /// was opened with them off for a restore; nothing otherwise.
    pub(super) fn resume(&self, rocks: &Rocks, handles: &[&Handle]) -> Result<()> {
        let mut restoring = self.restoring.lock();
        if *restoring {
            auto_compactions(rocks, handles, true)?;
            *restoring = false;
        }
        Ok(())
    }
}

impl Held<'_> {
    /// Flushes the memtables of `targets` and waits for every flush and compaction already
    /// scheduled or running: none finishes after this returns while the hold and the front's
    /// lock (no write starts a flush) are held.
    pub(super) fn settle(&self, targets: &[&Handle]) -> Result<()> {
        if !targets.is_empty() {
            self.rocks
                .flush_cfs_opt(targets, &rocksdb::FlushOptions::default())
                .map_err(rocks_error)?;
        }
        self.rocks
            .wait_for_compact(&rocksdb::WaitForCompactOptions::default())
            .map_err(rocks_error)
    }

    /// Lets background jobs run again: turns compactions back on if this hold turned them
    /// off.
    pub(super) fn release(mut self) -> Result<()> {
        let turned_off = std::mem::replace(&mut self.turned_off, false);
        if turned_off {
            auto_compactions(self.rocks, &self.handles, true)?;
        }
        Ok(())
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if self.turned_off {
            if let Err(e) = auto_compactions(self.rocks, &self.handles, true) {
                tracing::error!(error = %e, "automatic compactions stay off after an ingestion");
            }
        }
    }
}

/// Sets `disable_auto_compactions` of every column family in `handles` to `!on`.
fn auto_compactions(rocks: &Rocks, handles: &[&Handle], on: bool) -> Result<()> {
    let value = if on { "false" } else { "true" };
    for h in handles {
        rocks
            .set_options_cf(*h, &[("disable_auto_compactions", value)])
            .map_err(rocks_error)?;
    }
    Ok(())
}
