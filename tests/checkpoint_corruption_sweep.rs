//! Corruption sweep over every object of real checkpoint storage, in every mode, against every
//! kind of restore (complements `checkpoint_corruption.rs`, which damages only the files the
//! newest checkpoint names and restores only at the same parallelism).
//!
//! Bases (each built once, on local storage):
//! * `plain`: one instance, eight states (value, list, map, reducing, aggregating, and TTL
//!   value/list/map), two incremental checkpoints, both retained;
//! * `log`: changelog mode, a materialization, then log checkpoints whose newest manifest
//!   names log tables *and* segments after them;
//! * `p2`: a job of two instances (job records naming two manifests), two checkpoints;
//! * `savepoint`: a canonical savepoint file of the eight states.
//!
//! For every object in storage (every SST, manifest, private file, log segment, log table,
//! job record; the savepoint file) × every damage (truncate to 0, by one byte, to half; flip
//! one byte at the start, middle, end, 64 and 20 bytes before the end; delete) × every
//! restore kind (same parallelism, older checkpoint, 1→2 halves, 2→1, heap/RocksDB from the
//! savepoint) the restore runs with its panics caught. Expected:
//! a typed error of kind Corruption (or NotFound for a deleted object, Unsupported for a
//! version field), or — only for an object the restore does not need — exactly the state of
//! the checkpoint it restored (every key of every state compared with the model). After a
//! failed restore the target must be absent or refused by a later open.
//!
//! Every anomaly is collected; the test prints a summary and fails if any was found.
//! `SWEEP_OUT=<dir>` also writes each base's full result table there.

#[path = "rescale_common/mod.rs"]
mod rescale_common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rescale_common::{
    check, checkpoint_job, owner_of, owns, random_ops, small_options, Avg, Model, KEYS, M, NS,
};
use rockstate::checkpoint::layout;
use rockstate::{
    BackendKind, ChangelogOptions, CheckpointOptions, CheckpointStorage, Error, ErrorKind,
    KeyGroupRange, KeyedBackend, LocalStorage, RestoreFrom, StateDescriptor, TtlConfig,
};
use sst_format::CheckpointManifest;

type K = (u32, u8);

/// The model of all eight states.
#[derive(Debug, Default, Clone, PartialEq)]
struct Full {
    base: Model,
    tv: BTreeMap<K, u64>,
    tl: BTreeMap<K, Vec<u32>>,
    tm: BTreeMap<K, BTreeMap<u16, u32>>,
}

fn ttl(name: &str) -> StateDescriptor {
    StateDescriptor::new(name).with_ttl(TtlConfig::new(Duration::from_secs(24 * 3600)))
}

/// Registers every state (so a restored backend can be read).
fn register_all(b: &KeyedBackend) -> rockstate::Result<()> {
    b.value_state::<u32, u8, u64>("value")?;
    b.list_state::<u32, u8, u32>("list")?;
    b.map_state::<u32, u8, u16, u32>("map")?;
    b.reducing_state::<u32, u8, u64>("reduce", |a, b| a + b)?;
    b.aggregating_state::<u32, u8, Avg>("agg", Avg)?;
    b.value_state::<u32, u8, u64>(ttl("ttl_value"))?;
    b.list_state::<u32, u8, u32>(ttl("ttl_list"))?;
    b.map_state::<u32, u8, u16, u32>(ttl("ttl_map"))?;
    Ok(())
}

fn ops(b: &KeyedBackend, m: &mut Full, r: &mut SmallRng, n: usize) {
    random_ops(b, &mut m.base, r, n);
    let v = b.value_state::<u32, u8, u64>(ttl("ttl_value")).unwrap();
    let l = b.list_state::<u32, u8, u32>(ttl("ttl_list")).unwrap();
    let mm = b.map_state::<u32, u8, u16, u32>(ttl("ttl_map")).unwrap();
    let mut done = 0;
    while done < n / 3 {
        let key = r.random_range(0..KEYS);
        if !owns(b, key) {
            continue;
        }
        done += 1;
        let ns = r.random_range(0..NS);
        let k = (key, ns);
        let x: u32 = r.random_range(0..1_000_000);
        match r.random_range(0..8) {
            0 | 1 => {
                v.put(&key, &ns, &u64::from(x)).unwrap();
                m.tv.insert(k, u64::from(x));
            }
            2 => {
                v.clear(&key, &ns).unwrap();
                m.tv.remove(&k);
            }
            3 => {
                l.add(&key, &ns, &x).unwrap();
                m.tl.entry(k).or_default().push(x);
            }
            4 => {
                let run = vec![x, x + 1];
                l.update(&key, &ns, &run).unwrap();
                m.tl.insert(k, run);
            }
            5 | 6 => {
                let uk = (x % 8) as u16;
                mm.put(&key, &ns, &uk, &x).unwrap();
                m.tm.entry(k).or_default().insert(uk, x);
            }
            _ => {
                let uk = (x % 8) as u16;
                mm.remove(&key, &ns, &uk).unwrap();
                if let Some(e) = m.tm.get_mut(&k) {
                    e.remove(&uk);
                    if e.is_empty() {
                        m.tm.remove(&k);
                    }
                }
            }
        }
    }
}

/// Compares every key of every state `b` owns with the model.
fn check_full(b: &KeyedBackend, m: &Full) -> Result<(), String> {
    let r = catch_unwind(AssertUnwindSafe(|| {
        register_all(b).unwrap();
        check(b, &m.base);
        let v = b.value_state::<u32, u8, u64>(ttl("ttl_value")).unwrap();
        let l = b.list_state::<u32, u8, u32>(ttl("ttl_list")).unwrap();
        let mm = b.map_state::<u32, u8, u16, u32>(ttl("ttl_map")).unwrap();
        for key in (0..KEYS).filter(|k| owns(b, *k)) {
            for ns in 0..NS {
                let k = (key, ns);
                assert_eq!(
                    v.get(&key, &ns).unwrap(),
                    m.tv.get(&k).copied(),
                    "ttl_value {k:?}"
                );
                assert_eq!(
                    &l.get(&key, &ns).unwrap(),
                    m.tl.get(&k).unwrap_or(&Vec::new()),
                    "ttl_list {k:?}"
                );
                let got: BTreeMap<u16, u32> = mm.entries(&key, &ns).unwrap().into_iter().collect();
                assert_eq!(
                    &got,
                    m.tm.get(&k).unwrap_or(&BTreeMap::new()),
                    "ttl_map {k:?}"
                );
            }
        }
    }));
    r.map_err(|p| panic_text(&p))
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<String>() {
        s.chars().take(300).collect()
    } else if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else {
        "non-string panic".into()
    }
}

/// No state registered (checked without registering anything).
fn no_states(b: &KeyedBackend) -> Result<(), String> {
    let states = b.states().map_err(|e| e.to_string())?;
    if !states.is_empty() {
        return Err(format!(
            "states registered after a failed restore: {:?}",
            states.iter().map(|s| &s.name).collect::<Vec<_>>()
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Damage

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Damage {
    Trunc0,
    TruncMinus1,
    TruncHalf,
    FlipStart,
    FlipMiddle,
    FlipEnd,
    FlipEnd64,
    FlipEnd20,
    Delete,
}

const DAMAGES: [Damage; 9] = [
    Damage::Trunc0,
    Damage::TruncMinus1,
    Damage::TruncHalf,
    Damage::FlipStart,
    Damage::FlipMiddle,
    Damage::FlipEnd,
    Damage::FlipEnd64,
    Damage::FlipEnd20,
    Damage::Delete,
];

/// Applies `d` to the file at `path` (a new inode: the original may be hard-linked
/// elsewhere). Returns false if the damage does not apply (file too short).
fn damage(path: &Path, d: Damage) -> bool {
    let mut bytes = fs::read(path).unwrap();
    let n = bytes.len();
    let flip = |bytes: &mut Vec<u8>, at: usize, mask: u8| bytes[at] ^= mask;
    match d {
        Damage::Trunc0 => bytes.clear(),
        Damage::TruncMinus1 => {
            if n == 0 {
                return false;
            }
            bytes.truncate(n - 1)
        }
        Damage::TruncHalf => bytes.truncate(n / 2),
        Damage::FlipStart if n > 0 => flip(&mut bytes, 0, 0x01),
        Damage::FlipMiddle if n > 0 => flip(&mut bytes, n / 2, 0x80),
        Damage::FlipEnd if n > 0 => flip(&mut bytes, n - 1, 0x10),
        Damage::FlipEnd64 if n >= 64 => flip(&mut bytes, n - 64, 0x04),
        Damage::FlipEnd20 if n >= 20 => flip(&mut bytes, n - 20, 0x40),
        Damage::Delete => {
            fs::remove_file(path).unwrap();
            return true;
        }
        _ => return false,
    }
    fs::remove_file(path).unwrap();
    fs::write(path, bytes).unwrap();
    true
}

/// Every object under `root` (no `.tmp`, no pins), relative names.
fn object_names(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in fs::read_dir(dir).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                walk(root, &e.path(), out);
            } else {
                out.push(
                    e.path()
                        .strip_prefix(root)
                        .unwrap()
                        .to_str()
                        .unwrap()
                        .to_string(),
                );
            }
        }
    }
    let mut all = Vec::new();
    walk(root, root, &mut all);
    all.retain(|n| !n.starts_with(".tmp/") && !n.starts_with("pins/"));
    all.sort();
    all
}

/// A copy of the storage directory `from` at `to` by hard links.
fn link_copy(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            link_copy(&e.path(), &target);
        } else {
            fs::hard_link(e.path(), &target).unwrap();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// What a restore needs

/// Object class, for the summary.
fn class_of(name: &str, log_tables: &BTreeSet<String>) -> String {
    if name.starts_with("job/") {
        "job-record".into()
    } else if name.ends_with("/_metadata") {
        "manifest".into()
    } else if name.starts_with("shared/") && name.ends_with(".log") {
        "log-segment".into()
    } else if log_tables.contains(name) {
        "log-table-sst".into()
    } else if name.starts_with("shared/") {
        "shared-sst".into()
    } else {
        let local = name.rsplit('/').next().unwrap();
        let stem = local.split('-').next().unwrap();
        format!("private:{stem}")
    }
}

struct Storage {
    root: PathBuf,
}

impl Storage {
    fn open(&self) -> Arc<dyn CheckpointStorage> {
        Arc::new(LocalStorage::new(&self.root).unwrap())
    }
    fn manifest(&self, name: &str) -> CheckpointManifest {
        sst_format::decode_manifest(&fs::read(self.root.join(name)).unwrap()).unwrap()
    }
    fn record(&self, id: u64) -> sst_format::JobCheckpoint {
        let bytes = fs::read(self.root.join(layout::job_record_name(id))).unwrap();
        sst_format::decode_job_checkpoint(&bytes).unwrap()
    }
}

/// Objects a restore of checkpoint `id` into `range` needs: `(certain, maybe)`; `maybe` are
/// those it may legitimately leave unread (SSTs a rescale may skip, segments a log table
/// covers).
fn needs(s: &Storage, id: u64, range: KeyGroupRange) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut certain = BTreeSet::new();
    let mut maybe = BTreeSet::new();
    certain.insert(layout::job_record_name(id));
    let rec = s.record(id);
    let manifests: Vec<String> = rec
        .tasks
        .iter()
        .filter_map(|t| t.manifest.clone())
        .collect();
    let ms: Vec<(String, CheckpointManifest)> = manifests
        .into_iter()
        .map(|n| (n.clone(), s.manifest(&n)))
        .collect();
    let exact = ms
        .iter()
        .any(|(_, m)| (m.key_group_start, m.key_group_end) == (range.start, range.end));
    for (name, m) in &ms {
        let overlaps = m.key_group_start <= range.end && m.key_group_end >= range.start;
        let this_exact = (m.key_group_start, m.key_group_end) == (range.start, range.end);
        if (exact && !this_exact) || !overlaps {
            continue;
        }
        let rescaling = !exact;
        certain.insert(name.clone());
        for f in &m.shared_files {
            if rescaling && f.key_range.is_some() {
                maybe.insert(f.remote_name.clone());
            } else {
                certain.insert(f.remote_name.clone());
            }
        }
        for f in &m.private_files {
            certain.insert(f.remote_name.clone());
        }
        if let Some(c) = &m.changelog {
            let tabled_to = c.tables.last().map_or(c.materialized_seq, |t| t.end_seq);
            for seg in &c.segments {
                let outside = seg
                    .key_groups
                    .is_some_and(|(a, b)| b < range.start || a > range.end);
                if seg.first_seq + seg.entries <= tabled_to || outside {
                    maybe.insert(seg.remote_name.clone());
                } else {
                    certain.insert(seg.remote_name.clone());
                }
            }
            for t in &c.tables {
                for f in &t.files {
                    certain.insert(f.remote_name.clone());
                }
            }
        }
    }
    for m in &maybe {
        certain.remove(m);
    }
    (certain, maybe)
}

/// Manifests job record `id` names.
fn named_by(s: &Storage, id: u64) -> BTreeSet<String> {
    s.record(id)
        .tasks
        .iter()
        .filter_map(|t| t.manifest.clone())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Running restores

#[derive(Debug)]
enum Outcome {
    /// Restored; the checkpoint id it reports, and the comparison with that id's model.
    Ok(Option<u64>, Result<(), String>),
    Err(Error, Option<String>),
    Panic(String),
}

/// Runs `f` with its panics caught as an outcome (a hang hangs the test: no clock decides it).
fn guarded(f: impl FnOnce() -> Outcome) -> Outcome {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| Outcome::Panic(panic_text(&p)))
}

/// After a failed restore into `target`: absent, or refused by an open (marker), or an
/// empty backend. Returns a problem if a later open accepts state.
fn after_failure(target: &Path, range: KeyGroupRange) -> Option<String> {
    if !target.exists() {
        return None;
    }
    let entries: Vec<String> = fs::read_dir(target)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    if entries.is_empty() {
        return None;
    }
    let opened = KeyedBackend::builder(target)
        .options(small_options())
        .max_parallelism(M)
        .key_groups(range)
        .open();
    match opened {
        Err(Error::RestoreIncomplete(_)) => None,
        Err(e) => Some(format!("target left with {entries:?}; open: {e}")),
        Ok(b) => match b.states() {
            Ok(s) if s.is_empty() => Some(format!("target left with {entries:?} (opens empty)")),
            Ok(s) => Some(format!(
                "HALF STATE: target left with {entries:?} and a later open accepts states {:?}",
                s.iter().map(|x| &x.name).collect::<Vec<_>>()
            )),
            Err(e) => Some(format!("target left with {entries:?}; states: {e}")),
        },
    }
}

#[derive(Clone)]
struct RestoreKind {
    label: &'static str,
    from: RestoreFrom,
    p: u32,
    i: u32,
    /// The checkpoint id it restores from the undamaged storage.
    id: u64,
}

fn restore_checkpoint(
    storage: Arc<dyn CheckpointStorage>,
    target: PathBuf,
    k: RestoreKind,
    models: Arc<BTreeMap<u64, Full>>,
    changelog: bool,
) -> Outcome {
    let range = KeyGroupRange::for_operator(M, k.p, k.i).unwrap();
    let mut opts = CheckpointOptions {
        local_recovery: false,
        ..CheckpointOptions::default()
    };
    if changelog {
        opts.changelog = log_options();
    }
    let t2 = target.clone();
    guarded(move || {
        let r = KeyedBackend::builder(&t2)
            .options(small_options())
            .max_parallelism(M)
            .key_groups(range)
            .checkpoint_storage(storage)
            .checkpoint_options(opts)
            .restore(k.from.clone());
        match r {
            Ok(b) => {
                let id = b.last_completed_checkpoint();
                let cmp = match id.and_then(|id| models.get(&id)) {
                    Some(m) => check_full(&b, m),
                    None => Err(format!("restored unknown checkpoint {id:?}")),
                };
                drop(b);
                Outcome::Ok(id, cmp)
            }
            Err(e) => {
                let left = after_failure(&t2, range);
                Outcome::Err(e, left)
            }
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Judging

#[derive(Default)]
struct Tally {
    cases: usize,
    passed: usize,
    anomalies: Vec<String>,
    /// (restore, class, damage) → outcome → count
    table: BTreeMap<(String, String, String), BTreeMap<String, usize>>,
}

impl Tally {
    fn note(&mut self, restore: &str, class: &str, d: &str, outcome: String) {
        *self
            .table
            .entry((restore.into(), class.into(), d.into()))
            .or_default()
            .entry(outcome)
            .or_default() += 1;
    }
}

fn short(e: &Error) -> String {
    let variant = format!("{e:?}");
    let variant = variant.split([' ', '(', '{']).next().unwrap().to_string();
    format!("{variant}/{:?}", e.kind())
}

/// Judges one outcome. `needed`: the restore reads the object (`Some(true)`), may leave it
/// unread (`None`), does not need it (`Some(false)`). `fallback_ok`: restoring another
/// checkpoint id than `want` is legitimate (the newest record was deleted).
#[allow(clippy::too_many_arguments)]
fn judge(
    t: &mut Tally,
    base: &str,
    restore: &str,
    object: &str,
    class: &str,
    d: Damage,
    needed: Option<bool>,
    want: u64,
    fallback_ok: bool,
    o: Outcome,
) {
    t.cases += 1;
    let ds = format!("{d:?}");
    let what = format!("[{base}] {restore} / {object} ({class}) / {ds}");
    let bad = |t: &mut Tally, msg: String| t.anomalies.push(format!("{what}: {msg}"));
    match o {
        Outcome::Panic(p) => {
            t.note(restore, class, &ds, "PANIC".into());
            bad(t, format!("PANIC {p}"));
        }
        Outcome::Ok(id, cmp) => {
            t.note(restore, class, &ds, format!("ok(id {id:?})"));
            let mut ok = true;
            if let Err(e) = cmp {
                ok = false;
                bad(t, format!("WRONG STATE restored (id {id:?}): {e}"));
            } else if id != Some(want) && !fallback_ok {
                ok = false;
                bad(t, format!("restored checkpoint {id:?}, wanted {want}"));
            }
            if needed == Some(true) {
                ok = false;
                bad(
                    t,
                    "SUCCEEDED although the damaged object is needed (unverified?)".into(),
                );
            }
            if ok {
                t.passed += 1;
            }
        }
        Outcome::Err(e, left) => {
            let kind = e.kind();
            t.note(restore, class, &ds, short(&e));
            let mut ok = true;
            if needed == Some(false) {
                ok = false;
                bad(
                    t,
                    format!(
                        "FAILED although the object is not needed: {} {e}",
                        short(&e)
                    ),
                );
            } else {
                let acceptable = match kind {
                    ErrorKind::Corruption => true,
                    ErrorKind::NotFound => d == Damage::Delete,
                    ErrorKind::Unsupported => matches!(e, Error::Format { .. }),
                    _ => false,
                };
                if !acceptable {
                    ok = false;
                    bad(t, format!("VAGUE error kind {}: {e}", short(&e)));
                }
                if matches!(e, Error::RocksDb { .. }) {
                    ok = false;
                    bad(
                        t,
                        format!("detected only by RocksDB (unverified bytes opened): {e}"),
                    );
                }
                if let Error::CheckpointCorrupt { file, .. } = &e {
                    if file != object && needed == Some(true) && class != "job-record" {
                        t.note(restore, class, &ds, format!("names other file {file}"));
                    }
                }
            }
            if let Some(l) = left {
                ok = false;
                bad(t, format!("after failure: {l}"));
            }
            if ok {
                t.passed += 1;
            }
        }
    }
}

fn report(base: &str, t: &Tally) {
    let mut out = String::new();
    for ((r, c, d), outs) in &t.table {
        out.push_str(&format!("{base}\t{r}\t{c}\t{d}\t{outs:?}\n"));
    }
    if let Ok(dir) = std::env::var("SWEEP_OUT") {
        fs::create_dir_all(&dir).unwrap();
        fs::write(Path::new(&dir).join(format!("{base}.tsv")), &out).unwrap();
        fs::write(
            Path::new(&dir).join(format!("{base}.anomalies")),
            t.anomalies.join("\n"),
        )
        .unwrap();
    }
    eprintln!(
        "[{base}] {} cases, {} passed, {} anomalies",
        t.cases,
        t.passed,
        t.anomalies.len()
    );
    for a in t.anomalies.iter().take(60) {
        eprintln!("  {a}");
    }
}

// ---------------------------------------------------------------------------------------------
// Bases

fn log_options() -> ChangelogOptions {
    ChangelogOptions {
        enabled: true,
        materialize_interval_ms: u64::MAX,
        materialize_log_percent: 100_000,
        materialize_min_log_bytes: 0,
        table_bytes: 4096,
        ..ChangelogOptions::default()
    }
}

fn single(
    dir: &Path,
    storage: Arc<dyn CheckpointStorage>,
    opts: CheckpointOptions,
) -> KeyedBackend {
    single_with(dir, storage, opts, small_options())
}

fn single_with(
    dir: &Path,
    storage: Arc<dyn CheckpointStorage>,
    opts: CheckpointOptions,
    db: rockstate::DbOptions,
) -> KeyedBackend {
    let b = KeyedBackend::builder(dir.join("src").join("a"))
        .options(db)
        .max_parallelism(M)
        .checkpoint_storage(storage)
        .checkpoint_options(opts)
        .open()
        .unwrap();
    register_all(&b).unwrap();
    b
}

/// Sweeps every object of the storage at `root` × every damage × `kinds`.
fn sweep_storage(
    base: &str,
    root: &Path,
    scratch: &Path,
    kinds: &[RestoreKind],
    models: Arc<BTreeMap<u64, Full>>,
    changelog: bool,
    t: &mut Tally,
) {
    let s = Storage {
        root: root.to_path_buf(),
    };
    let mut log_tables = BTreeSet::new();
    for n in object_names(root)
        .iter()
        .filter(|n| n.ends_with("/_metadata"))
    {
        if let Some(c) = s.manifest(n).changelog {
            for tb in &c.tables {
                log_tables.extend(tb.files.iter().map(|f| f.remote_name.clone()));
            }
        }
    }
    let mut objects = object_names(root);
    // A storage of many SSTs: every non-SST object, and a spread sample of SSTs.
    let ssts = objects.iter().filter(|n| n.ends_with(".sst")).count();
    if ssts > 60 {
        let step = ssts / 40;
        let mut i = 0;
        objects.retain(|n| {
            if !n.ends_with(".sst") {
                return true;
            }
            i += 1;
            i % step == 0
        });
    }
    eprintln!("[{base}] {} objects: {objects:?}", objects.len());
    // Baseline: every kind restores its checkpoint exactly from undamaged storage.
    for k in kinds {
        let target = scratch.join(format!("baseline-{}", k.label));
        match restore_checkpoint(
            s.open(),
            target.clone(),
            k.clone(),
            models.clone(),
            changelog,
        ) {
            Outcome::Ok(Some(id), Ok(())) if id == k.id => {}
            o => panic!("[{base}] baseline {} failed: {o:?}", k.label),
        }
        let _ = fs::remove_dir_all(&target);
    }
    let needs: Vec<(BTreeSet<String>, BTreeSet<String>)> = kinds
        .iter()
        .map(|k| needs(&s, k.id, KeyGroupRange::for_operator(M, k.p, k.i).unwrap()))
        .collect();
    let mut n = 0;
    for object in &objects {
        let class = class_of(object, &log_tables);
        for d in DAMAGES {
            let case_root = scratch.join(format!("case-{n}"));
            n += 1;
            let storage_root = case_root.join("storage");
            link_copy(root, &storage_root);
            if !damage(&storage_root.join(object), d) {
                let _ = fs::remove_dir_all(&case_root);
                continue;
            }
            for (k, (certain, maybe)) in kinds.iter().zip(&needs) {
                let target = case_root.join(format!("t-{}", k.label));
                let storage: Arc<dyn CheckpointStorage> =
                    Arc::new(LocalStorage::new(&storage_root).unwrap());
                let o = restore_checkpoint(storage, target, k.clone(), models.clone(), changelog);
                let other_manifest = object.ends_with("/_metadata")
                    && !certain.contains(object)
                    && named_by(&s, k.id).contains(object);
                let needed = if other_manifest {
                    // `select` loads every manifest the record names before choosing.
                    None
                } else if object.starts_with("job/") && !certain.contains(object) {
                    // The restored backend's own JobOwner reads the newest records.
                    None
                } else if certain.contains(object) {
                    Some(true)
                } else if maybe.contains(object) {
                    None
                } else {
                    Some(false)
                };
                // Deleting the newest job record un-completes that checkpoint: `Latest` then
                // restores the one before (or, with no record left, the newest manifests).
                let record_gone = d == Damage::Delete && *object == layout::job_record_name(k.id);
                let needed = if record_gone { Some(false) } else { needed };
                judge(
                    t,
                    base,
                    k.label,
                    object,
                    &class,
                    d,
                    needed,
                    k.id,
                    record_gone,
                    o,
                );
            }
            let _ = fs::remove_dir_all(&case_root);
        }
    }
}

/// Runs `rounds` of `(checkpoint id, operations)` on `b` (random operations from `seed`, then
/// the checkpoint, judged by `check`, completed); returns the model after each, by id.
fn completed_rounds(
    b: &KeyedBackend,
    seed: u64,
    rounds: &[(u64, usize)],
    check: impl Fn(u64, &rockstate::CheckpointStats),
) -> BTreeMap<u64, Full> {
    let mut r = SmallRng::seed_from_u64(seed);
    let mut model = Full::default();
    let mut models = BTreeMap::new();
    for &(id, n) in rounds {
        ops(b, &mut model, &mut r, n);
        let st = b.checkpoint(id).unwrap();
        check(id, &st);
        b.notify_checkpoint_complete(id).unwrap();
        models.insert(id, model.clone());
    }
    models
}

/// A restore kind: `label`, restoring `from` as instance `i` of `p`, which restores checkpoint
/// `id` from the undamaged storage.
fn kind(label: &'static str, from: RestoreFrom, p: u32, i: u32, id: u64) -> RestoreKind {
    RestoreKind {
        label,
        from,
        p,
        i,
        id,
    }
}

/// Sweeps the storage at `root` (a base of checkpoints whose states `models` holds, by id)
/// against `kinds`, in scratch space under `dir`, reports, and fails on any anomaly.
fn sweep_and_judge(
    base: &str,
    dir: &Path,
    root: &Path,
    kinds: &[RestoreKind],
    models: BTreeMap<u64, Full>,
    changelog: bool,
) {
    let mut t = Tally::default();
    let scratch = dir.join("scratch");
    sweep_storage(
        base,
        root,
        &scratch,
        kinds,
        Arc::new(models),
        changelog,
        &mut t,
    );
    report(base, &t);
    assert!(t.anomalies.is_empty(), "{} anomalies", t.anomalies.len());
}

#[test]
fn sweep_plain_incremental() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("storage");
    let storage: Arc<dyn CheckpointStorage> = Arc::new(LocalStorage::new(&root).unwrap());
    let b = single(
        dir.path(),
        Arc::clone(&storage),
        CheckpointOptions {
            retained: 2,
            ..CheckpointOptions::default()
        },
    );
    let models = completed_rounds(&b, 7, &[(1, 3000), (2, 1200)], |_, _| {});
    drop(b);
    let kinds = [
        kind("p1-latest", RestoreFrom::Latest, 1, 0, 2),
        kind("p1-cp1", RestoreFrom::Checkpoint(1), 1, 0, 1),
        kind("1to2-h0", RestoreFrom::Latest, 2, 0, 2),
        kind("1to2-h1", RestoreFrom::Latest, 2, 1, 2),
    ];
    sweep_and_judge("plain", dir.path(), &root, &kinds, models, false);
}

#[test]
fn sweep_changelog_with_tables() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("storage");
    let storage: Arc<dyn CheckpointStorage> = Arc::new(LocalStorage::new(&root).unwrap());
    let b = single(
        dir.path(),
        Arc::clone(&storage),
        CheckpointOptions {
            changelog: log_options(),
            ..CheckpointOptions::default()
        },
    );
    // 1 materializes; 2 and 3 log enough for tables; 4 logs a little (a segment after them).
    let rounds = [(1, 3000), (2, 1500), (3, 1500), (4, 30)];
    let models = completed_rounds(&b, 8, &rounds, |id, st| {
        assert_eq!(st.materialized, id == 1, "{st:?}");
    });
    let meta = layout::metadata_name(4, b.backend_id());
    drop(b);
    let s = Storage { root: root.clone() };
    let c = s.manifest(&meta).changelog.unwrap();
    let tabled = c.tables.last().map_or(c.materialized_seq, |t| t.end_seq);
    let end = c.segments.last().map_or(0, |s| s.first_seq + s.entries);
    eprintln!(
        "log manifest: {} segments, {} tables, tabled to {tabled}, log ends {end}",
        c.segments.len(),
        c.tables.len()
    );
    assert!(
        !c.tables.is_empty() && end > tabled,
        "want tables and segments after them"
    );
    let kinds = [
        kind("p1-latest", RestoreFrom::Latest, 1, 0, 4),
        kind("1to2-h0", RestoreFrom::Latest, 2, 0, 4),
        kind("1to2-h1", RestoreFrom::Latest, 2, 1, 4),
    ];
    sweep_and_judge("log", dir.path(), &root, &kinds, models, true);
}

#[test]
fn sweep_parallelism_two_job() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("storage");
    let storage: Arc<dyn CheckpointStorage> = Arc::new(LocalStorage::new(&root).unwrap());
    let owner = owner_of(&storage, 1);
    let backends: Vec<KeyedBackend> = (0..2)
        .map(|i| {
            let b = KeyedBackend::builder(dir.path().join("src").join(format!("a-{i}")))
                .options(small_options())
                .max_parallelism(M)
                .key_groups(KeyGroupRange::for_operator(M, 2, i).unwrap())
                .checkpoint_storage(Arc::clone(&storage))
                .job_owner(Arc::clone(&owner))
                .open()
                .unwrap();
            register_all(&b).unwrap();
            b
        })
        .collect();
    let mut r = SmallRng::seed_from_u64(9);
    let mut model = Full::default();
    let mut models = BTreeMap::new();
    for (id, n) in [(1u64, 1500usize), (2, 600)] {
        for b in &backends {
            ops(b, &mut model, &mut r, n);
        }
        let refs: Vec<&KeyedBackend> = backends.iter().collect();
        checkpoint_job(&storage, &refs, id);
        models.insert(id, model.clone());
    }
    drop(backends);
    drop(owner);
    let kinds = [
        kind("2to1", RestoreFrom::Latest, 1, 0, 2),
        kind("p2-i0", RestoreFrom::Latest, 2, 0, 2),
        kind("p2-i1", RestoreFrom::Latest, 2, 1, 2),
    ];
    sweep_and_judge("p2", dir.path(), &root, &kinds, models, false);
}

/// Restores the savepoint at `path` into a fresh backend of `kind` owning `range`.
fn restore_sp(
    kind: BackendKind,
    dir: PathBuf,
    range: KeyGroupRange,
    path: PathBuf,
    m: Full,
) -> Outcome {
    guarded(move || {
        let b = KeyedBackend::builder(&dir)
            .kind(kind)
            .options(small_options())
            .max_parallelism(M)
            .key_groups(range)
            .open()
            .unwrap();
        match b.restore_savepoint(&path) {
            Ok(_) => {
                let cmp = check_full(&b, &m);
                Outcome::Ok(Some(0), cmp)
            }
            Err(e) => {
                let mut left = no_states(&b).err();
                drop(b);
                if kind == BackendKind::RocksDb && left.is_none() {
                    let again = KeyedBackend::builder(&dir)
                        .options(small_options())
                        .max_parallelism(M)
                        .key_groups(range)
                        .open()
                        .unwrap();
                    left = no_states(&again)
                        .and_then(|()| check_full(&again, &Full::default()))
                        .err()
                        .map(|e| format!("after reopen: {e}"));
                }
                Outcome::Err(e, left)
            }
        }
    })
}

#[test]
fn sweep_savepoint() {
    let dir = tempfile::tempdir().unwrap();
    let b = single(
        dir.path(),
        Arc::new(LocalStorage::new(dir.path().join("st")).unwrap()),
        CheckpointOptions::default(),
    );
    let mut r = SmallRng::seed_from_u64(10);
    let mut model = Full::default();
    ops(&b, &mut model, &mut r, 3000);
    let sp = dir.path().join("sp");
    b.write_savepoint(&sp).unwrap();
    drop(b);
    let len = fs::metadata(&sp).unwrap().len() as usize;
    let kinds: [(&str, BackendKind, u32, u32); 4] = [
        ("rocks-p1", BackendKind::RocksDb, 1, 0),
        ("rocks-h0", BackendKind::RocksDb, 2, 0),
        ("heap-p1", BackendKind::Heap, 1, 0),
        ("heap-h1", BackendKind::Heap, 2, 1),
    ];
    let mut t = Tally::default();
    let scratch = dir.path().join("scratch");
    let mut n = 0;
    // Baseline.
    for (label, kind, p, i) in kinds {
        let range = KeyGroupRange::for_operator(M, p, i).unwrap();
        match restore_sp(
            kind,
            scratch.join(format!("base-{label}")),
            range,
            sp.clone(),
            model.clone(),
        ) {
            Outcome::Ok(_, Ok(())) => {}
            o => panic!("baseline {label}: {o:?}"),
        }
    }
    let mut run =
        |t: &mut Tally, label: &str, d: Damage, apply: &dyn Fn(&Path) -> bool, only_heap: bool| {
            let case = scratch.join(format!("case-{n}"));
            n += 1;
            fs::create_dir_all(&case).unwrap();
            let file = case.join("sp");
            fs::copy(&sp, &file).unwrap();
            if !apply(&file) {
                return;
            }
            for (kl, kind, p, i) in kinds {
                if only_heap && kind != BackendKind::Heap {
                    continue;
                }
                let range = KeyGroupRange::for_operator(M, p, i).unwrap();
                let o = restore_sp(
                    kind,
                    case.join(format!("b-{kl}")),
                    range,
                    file.clone(),
                    model.clone(),
                );
                // A half may leave the other half's blocks unread.
                let needed = if p == 1 { Some(true) } else { None };
                judge(
                    t,
                    "savepoint",
                    kl,
                    "savepoint",
                    label,
                    d,
                    needed,
                    0,
                    false,
                    o,
                );
            }
            let _ = fs::remove_dir_all(&case);
        };
    for d in DAMAGES {
        run(&mut t, "savepoint", d, &|f| damage(f, d), false);
    }
    // Every 37th byte flipped (heap restores only: cheap).
    for at in (0..len).step_by(37) {
        run(
            &mut t,
            "savepoint-stride",
            Damage::FlipMiddle,
            &|f| {
                let mut bytes = fs::read(f).unwrap();
                bytes[at] ^= 0x20;
                fs::write(f, bytes).unwrap();
                true
            },
            true,
        );
    }
    report("savepoint", &t);
    assert!(t.anomalies.is_empty(), "{} anomalies", t.anomalies.len());
}
