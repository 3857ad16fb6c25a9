//! A TTL whose milliseconds do not fit in a u64 (about 585 million years, the kind of value
//! a caller passes for "practically forever") saturates: 18,446,744,073,709,552 s is
//! 2^64 + 384 ms, and a truncation to 384 ms would expire a value within a second.

use std::sync::Arc;
use std::time::Duration;

use rockstate::{KeyedBackend, ManualClock, StateDescriptor, TtlConfig};

#[test]
fn a_ttl_too_long_for_u64_milliseconds_is_not_truncated_to_384_ms() {
    let forever = Duration::from_secs(18_446_744_073_709_552);
    let cfg = TtlConfig::new(forever);
    assert!(
        cfg.ttl_ms() >= u64::MAX / 2,
        "ttl of {forever:?} became {} ms",
        cfg.ttl_ms()
    );
}

#[test]
fn a_value_with_a_practically_infinite_ttl_does_not_expire_within_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let b = KeyedBackend::builder(dir.path())
        .clock(Arc::new(clock.clone()))
        .open()
        .unwrap();
    let desc = StateDescriptor::new("v")
        .with_ttl(TtlConfig::new(Duration::from_secs(18_446_744_073_709_552)));
    let v = b.value_state::<u32, (), u32>(desc).unwrap();
    v.put(&1, &(), &1).unwrap();
    clock.advance(Duration::from_secs(1));
    assert_eq!(v.get(&1, &()).unwrap(), Some(1), "expired after one second");
}
