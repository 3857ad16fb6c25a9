//! Changelog mode with TTL states of every kind, restored again and again at parallelism
//! 1 → 2 → 3 → 1 (and same-parallelism restores), each restore exactly the last completed
//! checkpoint's state as reads would return it at the restore's clock, checked against an
//! in-memory model that knows every entry's timestamp. Expiry happens between checkpoints,
//! compaction filters drop expired entries the log still holds, the log buffer overflows.

#![allow(dead_code)]

mod rescale_common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rescale_common::{checkpoint_job, owner_of, owns, Avg, M, NS};
use rockstate::ttl::{TimeDomain, UpdateType};
use rockstate::{
    AggregateFunction, ChangelogOptions, CheckpointOptions, CheckpointStorage, DbOptions,
    KeyGroupRange, KeyedBackend, ManualClock, RestoreFrom, StateDescriptor, TtlConfig,
};

const KEYS: u32 = 150;
const TTL_MS: u64 = 10_000;

type K = (u32, u8);

#[derive(Clone, Copy, Debug)]
pub struct Cfg {
    pub orw: bool,
    pub event_time: bool,
    pub local_recovery: bool,
    pub max_log_buffer_bytes: usize,
    pub replay_batch_bytes: u64,
    pub table_bytes: u64,
}

#[derive(Debug, Default, Clone)]
pub struct Model {
    pub orw: bool,
    pub values: BTreeMap<K, (u64, u64)>,
    pub lists: BTreeMap<K, Vec<(u32, u64)>>,
    pub maps: BTreeMap<K, BTreeMap<u16, (u32, u64)>>,
    pub sums: BTreeMap<K, (u64, u64)>,
    pub avgs: BTreeMap<K, ((u64, u64), u64)>,
}

fn live(ts: u64, now: u64) -> bool {
    ts.saturating_add(TTL_MS) > now
}

impl Model {
    fn value_get(&mut self, k: K, now: u64) -> Option<u64> {
        match self.values.get_mut(&k) {
            Some((v, ts)) if live(*ts, now) => {
                if self.orw {
                    *ts = now;
                }
                Some(*v)
            }
            Some(_) => {
                self.values.remove(&k);
                None
            }
            None => None,
        }
    }
    fn sum_get(&mut self, k: K, now: u64) -> Option<u64> {
        match self.sums.get_mut(&k) {
            Some((v, ts)) if live(*ts, now) => {
                if self.orw {
                    *ts = now;
                }
                Some(*v)
            }
            Some(_) => {
                self.sums.remove(&k);
                None
            }
            None => None,
        }
    }
    fn avg_get(&mut self, k: K, now: u64) -> Option<(u64, u64)> {
        match self.avgs.get_mut(&k) {
            Some((v, ts)) if live(*ts, now) => {
                if self.orw {
                    *ts = now;
                }
                Some(*v)
            }
            Some(_) => {
                self.avgs.remove(&k);
                None
            }
            None => None,
        }
    }
    fn list_get(&mut self, k: K, now: u64) -> Vec<u32> {
        let orw = self.orw;
        let Some(l) = self.lists.get_mut(&k) else {
            return vec![];
        };
        l.retain(|(_, ts)| live(*ts, now));
        if orw {
            for e in l.iter_mut() {
                e.1 = now;
            }
        }
        let out: Vec<u32> = l.iter().map(|e| e.0).collect();
        if l.is_empty() {
            self.lists.remove(&k);
        }
        out
    }
    fn map_entries(&mut self, k: K, now: u64) -> BTreeMap<u16, u32> {
        let orw = self.orw;
        let Some(m) = self.maps.get_mut(&k) else {
            return BTreeMap::new();
        };
        m.retain(|_, (_, ts)| live(*ts, now));
        if orw {
            for e in m.values_mut() {
                e.1 = now;
            }
        }
        let out = m.iter().map(|(uk, (v, _))| (*uk, *v)).collect();
        if m.is_empty() {
            self.maps.remove(&k);
        }
        out
    }
    fn map_get(&mut self, k: K, uk: u16, now: u64) -> Option<u32> {
        let orw = self.orw;
        let m = self.maps.get_mut(&k)?;
        let out = match m.get_mut(&uk) {
            Some((v, ts)) if live(*ts, now) => {
                if orw {
                    *ts = now;
                }
                Some(*v)
            }
            Some(_) => {
                m.remove(&uk);
                None
            }
            None => None,
        };
        if m.is_empty() {
            self.maps.remove(&k);
        }
        out
    }
}

pub fn ttl(cfg: &Cfg) -> TtlConfig {
    let mut t = TtlConfig::new(Duration::from_millis(TTL_MS));
    if cfg.orw {
        t = t.update_type(UpdateType::OnReadAndWrite);
    }
    if cfg.event_time {
        t = t.time_domain(TimeDomain::EventTime);
    }
    t
}

pub struct States {
    v: rockstate::ValueState<u32, u8, u64>,
    l: rockstate::ListState<u32, u8, u32>,
    m: rockstate::MapState<u32, u8, u16, u32>,
    r: rockstate::ReducingState<u32, u8, u64>,
    a: rockstate::AggregatingState<u32, u8, Avg>,
}

pub fn states(b: &KeyedBackend, cfg: &Cfg) -> States {
    let d = |n: &str| StateDescriptor::new(n).with_ttl(ttl(cfg));
    States {
        v: b.value_state(d("value")).unwrap(),
        l: b.list_state(d("list")).unwrap(),
        m: b.map_state(d("map")).unwrap(),
        r: b.reducing_state(d("reduce"), |a: &u64, b: &u64| a + b)
            .unwrap(),
        a: b.aggregating_state(d("agg"), Avg).unwrap(),
    }
}

pub fn options() -> DbOptions {
    DbOptions {
        write_buffer_size: 64 << 10,
        target_file_size_base: 64 << 10,
        ..DbOptions::default()
    }
}

pub fn cp_options(cfg: &Cfg) -> CheckpointOptions {
    CheckpointOptions {
        local_recovery: cfg.local_recovery,
        changelog: ChangelogOptions {
            enabled: true,
            materialize_interval_ms: u64::MAX,
            materialize_log_percent: 100_000,
            materialize_min_log_bytes: 0,
            max_log_buffer_bytes: cfg.max_log_buffer_bytes,
            replay_batch_bytes: cfg.replay_batch_bytes,
            table_bytes: cfg.table_bytes,
            ..ChangelogOptions::default()
        },
        ..CheckpointOptions::default()
    }
}

pub fn builder(
    dir: &Path,
    storage: &Arc<dyn CheckpointStorage>,
    clock: &ManualClock,
    name: &str,
    p: u32,
    i: u32,
    cfg: &Cfg,
) -> rockstate::BackendBuilder {
    KeyedBackend::builder(dir.join(format!("{name}-{i}")))
        .options(options())
        .max_parallelism(M)
        .key_groups(KeyGroupRange::for_operator(M, p, i).unwrap())
        .clock(Arc::new(clock.clone()))
        .checkpoint_storage(Arc::clone(storage))
        .checkpoint_options(cp_options(cfg))
        .job_owner(owner_of(storage, 1))
}

/// `n` random operations on keys `b` owns.
pub fn random_ops(
    b: &KeyedBackend,
    cfg: &Cfg,
    model: &mut Model,
    rng: &mut SmallRng,
    n: usize,
    now: u64,
) {
    let s = states(b, cfg);
    let mut done = 0;
    while done < n {
        let key = rng.random_range(0..KEYS);
        if !owns(b, key) {
            continue;
        }
        done += 1;
        let ns = rng.random_range(0..NS);
        let k = (key, ns);
        let x: u32 = rng.random_range(0..1_000_000);
        match rng.random_range(0..17) {
            0 => {
                s.v.put(&key, &ns, &u64::from(x)).unwrap();
                model.values.insert(k, (u64::from(x), now));
            }
            1 => {
                s.v.clear(&key, &ns).unwrap();
                model.values.remove(&k);
            }
            2 => {
                assert_eq!(
                    s.v.get(&key, &ns).unwrap(),
                    model.value_get(k, now),
                    "op value {k:?}"
                );
            }
            3 => {
                s.l.add(&key, &ns, &x).unwrap();
                model.lists.entry(k).or_default().push((x, now));
            }
            4 => {
                let run: Vec<u32> = (0..2 + x % 2).map(|i| x.wrapping_add(i)).collect();
                s.l.add_all(&key, &ns, &run).unwrap();
                model
                    .lists
                    .entry(k)
                    .or_default()
                    .extend(run.iter().map(|e| (*e, now)));
            }
            5 => {
                let run: Vec<u32> = (0..1 + x % 3).map(|i| x.wrapping_add(i)).collect();
                s.l.update(&key, &ns, &run).unwrap();
                model
                    .lists
                    .insert(k, run.iter().map(|e| (*e, now)).collect());
            }
            6 => {
                s.l.clear(&key, &ns).unwrap();
                model.lists.remove(&k);
            }
            7 => {
                assert_eq!(
                    s.l.get(&key, &ns).unwrap(),
                    model.list_get(k, now),
                    "op list {k:?}"
                );
            }
            8 | 9 => {
                let uk = (x % 8) as u16;
                s.m.put(&key, &ns, &uk, &x).unwrap();
                model.maps.entry(k).or_default().insert(uk, (x, now));
            }
            10 => {
                let uk = (x % 8) as u16;
                s.m.remove(&key, &ns, &uk).unwrap();
                if let Some(mm) = model.maps.get_mut(&k) {
                    mm.remove(&uk);
                    if mm.is_empty() {
                        model.maps.remove(&k);
                    }
                }
            }
            11 => {
                s.m.clear(&key, &ns).unwrap();
                model.maps.remove(&k);
            }
            12 => {
                let uk = (x % 8) as u16;
                assert_eq!(
                    s.m.get(&key, &ns, &uk).unwrap(),
                    model.map_get(k, uk, now),
                    "op map {k:?}/{uk}"
                );
            }
            13 => {
                s.r.add(&key, &ns, &u64::from(x)).unwrap();
                let old = model.sum_get(k, now).unwrap_or(0);
                model.sums.insert(k, (old + u64::from(x), now));
            }
            14 => {
                s.a.add(&key, &ns, &x).unwrap();
                let old = model.avg_get(k, now).unwrap_or((0, 0));
                model
                    .avgs
                    .insert(k, ((old.0 + u64::from(x), old.1 + 1), now));
            }
            15 => {
                s.a.clear(&key, &ns).unwrap();
                model.avgs.remove(&k);
            }
            _ => {
                s.r.clear(&key, &ns).unwrap();
                model.sums.remove(&k);
            }
        }
    }
}

/// Reads every (key, namespace) `b` owns and compares with the model (reads refresh and
/// remove in both alike).
pub fn check(b: &KeyedBackend, cfg: &Cfg, model: &mut Model, now: u64, what: &str) {
    let s = states(b, cfg);
    for key in (0..KEYS).filter(|k| owns(b, *k)) {
        for ns in 0..NS {
            let k = (key, ns);
            assert_eq!(
                s.v.get(&key, &ns).unwrap(),
                model.value_get(k, now),
                "{what}: value {k:?}"
            );
            assert_eq!(
                s.l.get(&key, &ns).unwrap(),
                model.list_get(k, now),
                "{what}: list {k:?}"
            );
            let got: BTreeMap<u16, u32> = s.m.entries(&key, &ns).unwrap().into_iter().collect();
            assert_eq!(got, model.map_entries(k, now), "{what}: map {k:?}");
            assert_eq!(
                s.r.get(&key, &ns).unwrap(),
                model.sum_get(k, now),
                "{what}: reduce {k:?}"
            );
            assert_eq!(
                s.a.get(&key, &ns).unwrap(),
                model.avg_get(k, now).map(|acc| Avg.result(&acc)),
                "{what}: agg {k:?}"
            );
        }
    }
}

pub fn run(seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let cfg = Cfg {
        orw: rng.random_bool(0.5),
        event_time: rng.random_bool(0.5),
        local_recovery: rng.random_bool(0.5),
        max_log_buffer_bytes: [4 << 10, 8 << 10, 64 << 20][rng.random_range(0..3)],
        replay_batch_bytes: [0, 4 << 10, 256 << 20][rng.random_range(0..3)],
        table_bytes: [0, 1, 2500][rng.random_range(0..3)],
    };
    eprintln!("seed {seed}: {cfg:?}");
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(rockstate::LocalStorage::new(dir.path().join("storage")).unwrap());
    let clock = ManualClock::new(1_000_000);
    let mut model = Model {
        orw: cfg.orw,
        ..Model::default()
    };
    let mut p = 1;
    let mut gen = 0;
    let mut backends: Vec<KeyedBackend> = (0..p)
        .map(|i| {
            builder(dir.path(), &storage, &clock, "g0", p, i, &cfg)
                .open()
                .unwrap()
        })
        .collect();
    let mut id = 0;
    let mut id_completed = 0;
    let parallelisms = [1u32, 2, 2, 3, 1, 1, 3, 2, 1];
    for (step, &next_p) in parallelisms.iter().enumerate() {
        let mut snapshot = None;
        let restored_from = id_completed;
        let bases: Vec<_> = if step > 0 {
            backends
                .iter()
                .map(|b| rescale_common::restored_base(&storage, b, restored_from))
                .collect()
        } else {
            vec![]
        };
        for _round in 0..5 {
            for b in &backends {
                b.advance_watermark(clock.now_ms_pub());
                random_ops(b, &cfg, &mut model, &mut rng, 120, clock.now_ms_pub());
            }
            if rng.random_bool(0.3) {
                clock.advance(Duration::from_millis(TTL_MS + rng.random_range(0..3000)));
            } else {
                clock.advance(Duration::from_millis(rng.random_range(0..4000)));
            }
            for b in &backends {
                b.advance_watermark(clock.now_ms_pub());
                if rng.random_bool(0.5) && _round > 0 {
                    b.flush().unwrap();
                    for st in ["value", "list", "map", "reduce", "agg"] {
                        b.compact_state(st).unwrap();
                    }
                }
            }
            if rng.random_bool(0.25) {
                // A checkpoint that never completes: its changes must still reach the next.
                id += 1;
                for b in &backends {
                    b.checkpoint(id).unwrap();
                }
                for b in &backends {
                    b.advance_watermark(clock.now_ms_pub());
                    random_ops(b, &cfg, &mut model, &mut rng, 40, clock.now_ms_pub());
                }
                if rng.random_bool(0.5) {
                    for b in &backends {
                        b.notify_checkpoint_aborted(id).unwrap();
                    }
                }
            }
            id += 1;
            let refs: Vec<&KeyedBackend> = backends.iter().collect();
            let stats = checkpoint_job(&storage, &refs, id);
            eprintln!(
                "step {step} cp {id}: {:?}",
                stats
                    .iter()
                    .map(|s| (
                        s.materialized,
                        s.files_uploaded,
                        s.files_reused,
                        s.bytes_uploaded,
                        s.log_bytes_uploaded
                    ))
                    .collect::<Vec<_>>()
            );
            snapshot = Some((model.clone(), clock.now_ms_pub()));
            id_completed = id;
            if _round == 0 && step > 0 {
                for (b, base) in backends.iter().zip(&bases) {
                    rescale_common::assert_base_reused(&storage, b, id, base);
                }
            }
        }
        // Changes after the last completed checkpoint are lost by the restore.
        for b in &backends {
            random_ops(b, &cfg, &mut model, &mut rng, 50, clock.now_ms_pub());
        }
        if rng.random_bool(0.5) {
            id += 1;
            for b in &backends {
                b.checkpoint(id).unwrap();
            }
        }
        clock.advance(Duration::from_millis(rng.random_range(0..8000)));
        for b in &backends {
            b.advance_watermark(clock.now_ms_pub());
            b.flush().unwrap();
            for st in ["value", "list", "map", "reduce", "agg"] {
                b.compact_state(st).unwrap();
            }
        }
        drop(backends);
        let (snap, snap_time) = snapshot.unwrap();
        model = snap;
        gen += 1;
        p = next_p;
        let name = format!("g{gen}");
        backends = (0..p)
            .map(|i| {
                builder(dir.path(), &storage, &clock, &name, p, i, &cfg)
                    .restore(RestoreFrom::Latest)
                    .unwrap_or_else(|e| panic!("restore {name}-{i}: {e}"))
            })
            .collect();
        let now = clock.now_ms_pub();
        // Event time: the restored backends start at the checkpoint's watermark.
        let at = if cfg.event_time { snap_time } else { now };
        for b in &backends {
            check(
                b,
                &cfg,
                &mut model,
                at,
                &format!("seed {seed} step {step} restore at p={p}"),
            );
        }
        for b in &backends {
            b.advance_watermark(now);
        }
        for b in &backends {
            check(
                b,
                &cfg,
                &mut model,
                now,
                &format!("seed {seed} step {step} restore at p={p}, now"),
            );
        }
        // Savepoint of the restored job, restored at another parallelism.
        if step % 3 == 2 {
            let sp_dir = dir.path().join(format!("sp{step}"));
            std::fs::create_dir_all(&sp_dir).unwrap();
            let paths: Vec<_> = backends
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    let path = sp_dir.join(format!("{i}.sp"));
                    b.write_savepoint(&path).unwrap();
                    path
                })
                .collect();
            let refs: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
            let q = 2;
            let mut sp_model = model.clone();
            for i in 0..q {
                let b = KeyedBackend::builder(dir.path().join(format!("sp{step}-{i}")))
                    .options(options())
                    .max_parallelism(M)
                    .key_groups(KeyGroupRange::for_operator(M, q, i).unwrap())
                    .clock(Arc::new(clock.clone()))
                    .open()
                    .unwrap();

                b.restore_savepoints(&refs).unwrap();
                b.advance_watermark(now);
                check(
                    &b,
                    &cfg,
                    &mut sp_model,
                    now,
                    &format!("seed {seed} step {step} savepoint"),
                );
            }
        }
    }
}

trait NowPub {
    fn now_ms_pub(&self) -> u64;
}
impl NowPub for ManualClock {
    fn now_ms_pub(&self) -> u64 {
        rockstate::Clock::now_ms(self)
    }
}

#[test]
fn restores_match_the_model_seeds_1_to_3() {
    for seed in [1u64, 2, 3] {
        run(seed);
    }
}

#[test]
fn restores_match_the_model_seeds_4_to_6() {
    for seed in [4u64, 5, 6] {
        run(seed);
    }
}

#[test]
fn restores_match_the_model_seeds_7_and_8() {
    for seed in [7u64, 8] {
        run(seed);
    }
}
