//! `TtlConfig::ttl_ms` documents a TTL beyond u64 milliseconds (e.g. `Duration::MAX`, what a
//! caller passes for "never") as "`u64::MAX` ...: never expires". The expiry rule
//! `ts.saturating_add(ttl_ms) <= now` (src/ttl.rs `is_expired`) makes every such entry expire
//! once the clock reads `u64::MAX`, which an event-time watermark does at the end of a
//! bounded input (Flink's final watermark is the largest timestamp). Any value written at
//! `u64::MAX` is also gone on its very next read, whatever its TTL.

use std::sync::Arc;
use std::time::Duration;

use rockstate::ttl::TimeDomain;
use rockstate::{BackendKind, KeyedBackend, ManualClock, StateDescriptor, TtlConfig};

#[test]
fn a_never_expiring_ttl_survives_the_clock_or_watermark_reaching_u64_max() {
    let mut failures = Vec::new();
    for kind in [BackendKind::RocksDb, BackendKind::Heap] {
        for domain in [TimeDomain::ProcessingTime, TimeDomain::EventTime] {
            let dir = tempfile::tempdir().unwrap();
            let clock = ManualClock::new(1_000);
            let b = KeyedBackend::builder(dir.path())
                .kind(kind)
                .clock(Arc::new(clock.clone()))
                .open()
                .unwrap();
            b.advance_watermark(1_000);
            let forever = TtlConfig::new(Duration::MAX).time_domain(domain);
            assert_eq!(forever.ttl_ms(), u64::MAX);
            let v = b
                .value_state::<u32, (), u32>(StateDescriptor::new("v").with_ttl(forever.clone()))
                .unwrap();
            let l = b
                .list_state::<u32, (), u32>(StateDescriptor::new("l").with_ttl(forever))
                .unwrap();
            v.put(&1, &(), &1).unwrap();
            l.add(&1, &(), &1).unwrap();
            match domain {
                TimeDomain::ProcessingTime => clock.set(u64::MAX),
                TimeDomain::EventTime => b.advance_watermark(u64::MAX),
            }
            let (got_v, got_l) = (v.get(&1, &()).unwrap(), l.get(&1, &()).unwrap());
            if got_v != Some(1) || got_l != vec![1] {
                failures.push(format!(
                    "{kind:?} {domain:?}: written at 1000 with TTL Duration::MAX, read at \
                     u64::MAX: value {got_v:?}, list {got_l:?}"
                ));
            }
            // Written at u64::MAX, read at once.
            v.put(&2, &(), &2).unwrap();
            let got = v.get(&2, &()).unwrap();
            if got != Some(2) {
                failures.push(format!(
                    "{kind:?} {domain:?}: written and read at u64::MAX: {got:?}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
