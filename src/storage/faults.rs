//! [`FaultyStorage`]: a [`CheckpointStorage`] around another one that injects faults on
//! request: an error on the k-th operation of a kind, an operation that takes effect but
//! reports failure, a put that reports failure and takes effect later, a truncated upload,
//! added latency, and listings that miss fresh objects.
//! Public so users can fuzz their own checkpoint pipelines against storage failures.
//!
//! This module owns only the fault bookkeeping; every operation that is not faulted goes to
//! the inner storage unchanged.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::{CheckpointStorage, ObjectDigest, ObjectInfo};
use crate::error::{Error, Result};

/// The operations of [`CheckpointStorage`], for counting and targeting faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// [`CheckpointStorage::put_file`].
    PutFile,
    /// [`CheckpointStorage::put_bytes`].
    PutBytes,
    /// [`CheckpointStorage::get_file`].
    GetFile,
    /// [`CheckpointStorage::get_bytes`].
    GetBytes,
    /// [`CheckpointStorage::list`].
    List,
    /// [`CheckpointStorage::delete`].
    Delete,
}

impl OpKind {
    /// Every kind.
    pub const ALL: [OpKind; 6] = [
        OpKind::PutFile,
        OpKind::PutBytes,
        OpKind::GetFile,
        OpKind::GetBytes,
        OpKind::List,
        OpKind::Delete,
    ];

    fn index(self) -> usize {
        self as usize
    }

    fn name(self) -> &'static str {
        match self {
            OpKind::PutFile => "put_file",
            OpKind::PutBytes => "put_bytes",
            OpKind::GetFile => "get_file",
            OpKind::GetBytes => "get_bytes",
            OpKind::List => "list",
            OpKind::Delete => "delete",
        }
    }
}

/// One fault. Operation numbers count operations of that kind through this wrapper since it
/// was created, starting at 1 (see [`FaultyStorage::ops`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Operation number `nth` of kind `op` fails (a transient [`Error::Storage`]) without
    /// reaching the inner storage.
    FailNth {
        /// The operation kind.
        op: OpKind,
        /// Its number.
        nth: u64,
    },
    /// Operation number `nth` of kind `op` reaches the inner storage and takes effect, then
    /// reports a transient [`Error::Storage`] (a put that lands but times out).
    LandThenFail {
        /// The operation kind.
        op: OpKind,
        /// Its number.
        nth: u64,
    },
    /// Put number `nth` of kind `op` ([`OpKind::PutFile`] or [`OpKind::PutBytes`]) reports a
    /// transient [`Error::Storage`] without reaching the inner storage, and is applied to it
    /// only when [`FaultyStorage::land_late_puts`] is called: a put the server applies after
    /// its client gave up (and after any read-back the client made in between).
    LandLater {
        /// The operation kind.
        op: OpKind,
        /// Its number.
        nth: u64,
    },
    /// `put_file` number `nth` stores only the first half of the file (a truncated upload)
    /// and reports what was stored.
    TruncateNth {
        /// Its number.
        nth: u64,
    },
    /// Every operation of kind `op` (every operation if `None`) sleeps `delay` first.
    Latency {
        /// The kind, or all.
        op: Option<OpKind>,
        /// The delay.
        delay: Duration,
    },
    /// Listings omit the objects of the newest `last` successful puts (an eventually
    /// consistent listing).
    HideFresh {
        /// How many recent puts stay invisible to listings.
        last: usize,
    },
}

#[derive(Debug, Default)]
struct State {
    counts: [u64; 6],
    faults: Vec<Fault>,
    recent_puts: VecDeque<String>,
    injected: u64,
    /// Puts of [`Fault::LandLater`] not landed yet: name and bytes.
    late_puts: Vec<(String, Vec<u8>)>,
}

/// What to do with one operation.
#[derive(Debug, Default)]
struct Plan {
    fail_before: bool,
    fail_after: bool,
    land_later: bool,
    truncate: bool,
    delay: Duration,
}

/// A [`CheckpointStorage`] that injects [`Fault`]s into another one. Faults can be added and
/// cleared while in use.
#[derive(Debug)]
pub struct FaultyStorage {
    inner: Arc<dyn CheckpointStorage>,
    state: Mutex<State>,
}

impl FaultyStorage {
    /// Wraps `inner` with no faults.
    pub fn new(inner: Arc<dyn CheckpointStorage>) -> Self {
        FaultyStorage {
            inner,
            state: Mutex::new(State::default()),
        }
    }

    /// Adds a fault.
    pub fn add_fault(&self, fault: Fault) {
        self.state.lock().faults.push(fault);
    }

    /// Removes every fault (counts stay).
    pub fn clear_faults(&self) {
        self.state.lock().faults.clear();
    }

    /// Operations of kind `op` so far.
    pub fn ops(&self, op: OpKind) -> u64 {
        self.state.lock().counts[op.index()]
    }

    /// Faults injected so far (failures and truncations; latency not counted).
    pub fn injected(&self) -> u64 {
        self.state.lock().injected
    }

    /// Applies the puts [`Fault::LandLater`] held back, in the order they were made, to the
    /// inner storage (create-if-absent as every put: a name taken since is refused with
    /// [`Error::ObjectExists`]); returns each one's name and outcome.
    pub fn land_late_puts(&self) -> Vec<(String, Result<()>)> {
        let late = std::mem::take(&mut self.state.lock().late_puts);
        late.into_iter()
            .map(|(name, bytes)| {
                let r = self.inner.put_bytes(&name, &bytes);
                (name, r)
            })
            .collect()
    }

    /// The wrapped storage.
    pub fn inner(&self) -> &Arc<dyn CheckpointStorage> {
        &self.inner
    }

    fn plan(&self, op: OpKind) -> Plan {
        let mut s = self.state.lock();
        s.counts[op.index()] += 1;
        let n = s.counts[op.index()];
        let mut plan = Plan::default();
        for f in &s.faults {
            match *f {
                Fault::FailNth { op: o, nth } if o == op && nth == n => plan.fail_before = true,
                Fault::LandThenFail { op: o, nth } if o == op && nth == n => plan.fail_after = true,
                Fault::LandLater { op: o, nth }
                    if o == op && nth == n && matches!(op, OpKind::PutFile | OpKind::PutBytes) =>
                {
                    plan.land_later = true
                }
                Fault::TruncateNth { nth } if op == OpKind::PutFile && nth == n => {
                    plan.truncate = true
                }
                Fault::Latency { op: o, delay } if o.is_none_or(|o| o == op) => plan.delay += delay,
                _ => {}
            }
        }
        if plan.fail_before || plan.fail_after || plan.land_later || plan.truncate {
            s.injected += 1;
        }
        plan
    }

    /// Runs `f` under the faults planned for operation `op` on `name`.
    fn faulted<T>(&self, op: OpKind, name: &str, f: impl FnOnce(&Plan) -> Result<T>) -> Result<T> {
        let plan = self.plan(op);
        if !plan.delay.is_zero() {
            std::thread::sleep(plan.delay);
        }
        let injected = |when: &str| Error::Storage {
            operation: op.name(),
            name: name.to_string(),
            detail: format!("injected fault ({when})"),
            transient: true,
        };
        if plan.fail_before {
            return Err(injected("before the operation"));
        }
        let r = f(&plan)?;
        if matches!(op, OpKind::PutFile | OpKind::PutBytes) {
            let mut s = self.state.lock();
            s.recent_puts.push_back(name.to_string());
            if s.recent_puts.len() > 1024 {
                s.recent_puts.pop_front();
            }
        }
        if plan.fail_after {
            return Err(injected("after the operation took effect"));
        }
        Ok(r)
    }

    /// Keeps a [`Fault::LandLater`] put for [`FaultyStorage::land_late_puts`] and reports the
    /// transient failure its client sees.
    fn hold_back<T>(&self, name: &str, bytes: Vec<u8>) -> Result<T> {
        self.state.lock().late_puts.push((name.to_string(), bytes));
        Err(Error::Storage {
            operation: "put",
            name: name.to_string(),
            detail: "injected fault (the put lands later)".into(),
            transient: true,
        })
    }

    fn truncated_put(&self, name: &str, local: &Path) -> Result<ObjectDigest> {
        let mut bytes = Vec::new();
        std::fs::File::open(local)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(|e| Error::io(local, e))?;
        bytes.truncate(bytes.len() / 2);
        let mut tmp = tempfile::NamedTempFile::new().map_err(|e| Error::io(local, e))?;
        tmp.write_all(&bytes)
            .map_err(|e| Error::io(tmp.path(), e))?;
        self.inner.put_file(name, tmp.path())
    }
}

impl CheckpointStorage for FaultyStorage {
    fn put_file(&self, name: &str, local: &Path) -> Result<ObjectDigest> {
        self.faulted(OpKind::PutFile, name, |plan| {
            if plan.land_later {
                let bytes = std::fs::read(local).map_err(|e| Error::io(local, e))?;
                return self.hold_back(name, bytes);
            }
            if plan.truncate {
                self.truncated_put(name, local)
            } else {
                self.inner.put_file(name, local)
            }
        })
    }

    fn put_bytes(&self, name: &str, bytes: &[u8]) -> Result<()> {
        self.faulted(OpKind::PutBytes, name, |plan| {
            if plan.land_later {
                return self.hold_back(name, bytes.to_vec());
            }
            self.inner.put_bytes(name, bytes)
        })
    }

    fn get_file(&self, name: &str, local: &Path) -> Result<ObjectDigest> {
        self.faulted(OpKind::GetFile, name, |_| self.inner.get_file(name, local))
    }

    fn get_file_durable(&self, name: &str, local: &Path) -> Result<ObjectDigest> {
        self.faulted(OpKind::GetFile, name, |_| {
            self.inner.get_file_durable(name, local)
        })
    }

    fn get_bytes(&self, name: &str) -> Result<Vec<u8>> {
        self.faulted(OpKind::GetBytes, name, |_| self.inner.get_bytes(name))
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let mut out = self.faulted(OpKind::List, prefix, |_| self.inner.list(prefix))?;
        let s = self.state.lock();
        let hide = s
            .faults
            .iter()
            .filter_map(|f| match f {
                Fault::HideFresh { last } => Some(*last),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        if hide > 0 {
            let fresh: Vec<&String> = s.recent_puts.iter().rev().take(hide).collect();
            out.retain(|o| !fresh.contains(&&o.name));
        }
        Ok(out)
    }

    /// Not faulted and not counted: a HEAD is read-after-write consistent where listings lag
    /// (`Fault::HideFresh` hides objects from listings only).
    fn exists(&self, name: &str) -> Result<bool> {
        self.inner.exists(name)
    }

    fn delete(&self, name: &str) -> Result<()> {
        self.faulted(OpKind::Delete, name, |_| self.inner.delete(name))
    }

    fn sweep_incomplete(&self, now_ms: u64, min_age: Duration) -> Result<usize> {
        self.inner.sweep_incomplete(now_ms, min_age)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::LocalStorage;

    #[test]
    fn faults_fire_on_the_chosen_operation_only() {
        let dir = tempfile::tempdir().unwrap();
        let inner = Arc::new(LocalStorage::new(dir.path().join("root")).unwrap());
        let s = FaultyStorage::new(inner.clone());
        s.add_fault(Fault::FailNth {
            op: OpKind::PutBytes,
            nth: 2,
        });
        s.add_fault(Fault::LandThenFail {
            op: OpKind::PutBytes,
            nth: 3,
        });
        s.put_bytes("a", b"1").unwrap();
        assert!(matches!(
            s.put_bytes("b", b"2"),
            Err(Error::Storage {
                transient: true,
                ..
            })
        ));
        assert!(inner.get_bytes("b").is_err(), "failed before: not stored");
        assert!(s.put_bytes("c", b"3").is_err());
        assert_eq!(inner.get_bytes("c").unwrap(), b"3", "landed, then failed");
        s.put_bytes("d", b"4").unwrap();
        assert_eq!((s.ops(OpKind::PutBytes), s.injected()), (4, 2));

        let local = dir.path().join("f");
        std::fs::write(&local, b"0123456789").unwrap();
        s.add_fault(Fault::TruncateNth { nth: 1 });
        assert_eq!(s.put_file("t", &local).unwrap().size, 5);
        assert_eq!(inner.get_bytes("t").unwrap(), b"01234");
        assert_eq!(s.put_file("u", &local).unwrap().size, 10);

        s.add_fault(Fault::HideFresh { last: 2 });
        let mut names: Vec<_> = s.list("").unwrap().into_iter().map(|o| o.name).collect();
        names.sort();
        assert_eq!(names, ["a", "c", "d"], "t and u are the two freshest puts");
        s.clear_faults();
        assert_eq!(s.list("").unwrap().len(), 5);
    }

    #[test]
    fn late_puts_land_when_told_and_find_taken_names_taken() {
        let dir = tempfile::tempdir().unwrap();
        let inner = Arc::new(LocalStorage::new(dir.path().join("root")).unwrap());
        let s = FaultyStorage::new(inner.clone());
        let local = dir.path().join("f");
        std::fs::write(&local, b"file bytes").unwrap();
        s.add_fault(Fault::LandLater {
            op: OpKind::PutBytes,
            nth: 1,
        });
        s.add_fault(Fault::LandLater {
            op: OpKind::PutFile,
            nth: 1,
        });
        // Not for other kinds: a get has nothing to land.
        s.add_fault(Fault::LandLater {
            op: OpKind::GetBytes,
            nth: 1,
        });
        assert!(s.put_bytes("r", b"record").unwrap_err().is_transient());
        assert!(s.put_file("f", &local).unwrap_err().is_transient());
        assert_eq!(s.injected(), 2);
        assert!(!inner.exists("r").unwrap() && !inner.exists("f").unwrap());
        assert!(matches!(
            s.get_bytes("r"),
            Err(Error::ObjectNotFound { .. })
        ));
        // The client puts the record again before the late put lands.
        s.put_bytes("r", b"record").unwrap();
        let landed = s.land_late_puts();
        assert_eq!(landed.len(), 2);
        assert_eq!(landed[0].0, "r");
        assert!(matches!(landed[0].1, Err(Error::ObjectExists { .. })));
        assert_eq!(landed[1].0, "f");
        assert!(landed[1].1.is_ok());
        assert_eq!(inner.get_bytes("f").unwrap(), b"file bytes");
        assert!(s.land_late_puts().is_empty(), "each lands once");
    }
}
