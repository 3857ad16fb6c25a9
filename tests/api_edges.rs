//! Edges of the public API: a key group beyond the job's is refused rather than mapped onto
//! another group's prefix, a key-group range built inverted (its fields are public) is
//! refused at open, and a state registered again in the same session with other TTL settings
//! is refused rather than handed the first registration's.

use std::sync::Arc;
use std::time::Duration;

use rockstate::state::StateDescriptor;
use rockstate::{Error, KeyGroupRange, KeyedBackend, ManualClock, TtlConfig};

fn key_in_group(g: u16, m: u32) -> u64 {
    (0u64..)
        .find(|k| {
            rockstate::keygroup::key_group_of(&rockstate::codec::encode(k, "key").unwrap(), m) == g
        })
        .unwrap()
}

/// scan_key_group(name, 300) on a backend of max parallelism 128 visits group 44.
#[test]
fn a_key_group_beyond_max_parallelism_is_refused_not_another_scanned() {
    let mut failures = Vec::new();
    for heap in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let b = if heap {
            KeyedBackend::heap_builder()
                .max_parallelism(128)
                .open()
                .unwrap()
        } else {
            KeyedBackend::builder(dir.path())
                .max_parallelism(128)
                .open()
                .unwrap()
        };
        let s = b.value_state::<u64, (), u64>("s").unwrap();
        s.put(&key_in_group(44, 128), &(), &1).unwrap();
        let mut seen = Vec::new();
        let r = b.scan_key_group("s", 300, |e| {
            seen.push(e.key_group);
            Ok(true)
        });
        if !matches!(r, Err(Error::InvalidKeyGroups(_))) || !seen.is_empty() {
            failures.push(format!(
                "heap={heap}: key group 300 of 128: {r:?}, visited {seen:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

/// a backend opens with an inverted key-group range (start > end).
#[test]
fn inverted_key_group_range_is_refused() {
    for heap in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        // The fields are public (and the type is Deserialize): `KeyGroupRange::new` is bypassable.
        let range = KeyGroupRange { start: 5, end: 3 };
        let r = if heap {
            KeyedBackend::heap_builder().key_groups(range).open()
        } else {
            KeyedBackend::builder(dir.path()).key_groups(range).open()
        };
        assert!(
            matches!(r, Err(Error::InvalidKeyGroups(_))),
            "heap={heap}: an inverted range [5, 3] opened: {:?}",
            r.map(|b| b.key_groups())
        );
    }
}

/// re-registering a state in the same session with another TTL returns the first
/// registration's handle; the new TTL is silently ignored.
#[test]
fn another_ttl_in_the_same_session_is_refused() {
    let clock = ManualClock::new(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let b = KeyedBackend::builder(dir.path())
        .clock(Arc::new(clock.clone()))
        .open()
        .unwrap();
    let hour = StateDescriptor::new("s").with_ttl(TtlConfig::new(Duration::from_secs(3600)));
    let long = b.value_state::<u64, (), u64>(hour).unwrap();
    long.put(&1, &(), &7).unwrap();
    let ten_ms = StateDescriptor::new("s").with_ttl(TtlConfig::new(Duration::from_millis(10)));
    // A handle with a 10 ms TTL would return a value written a second ago: refused.
    let r = b.value_state::<u64, (), u64>(ten_ms);
    assert!(
        matches!(r, Err(Error::StateMismatch { .. })),
        "{:?}",
        r.map(|_| ())
    );
    // The same settings again are the same state.
    let again = StateDescriptor::new("s").with_ttl(TtlConfig::new(Duration::from_secs(3600)));
    assert_eq!(
        b.value_state::<u64, (), u64>(again)
            .unwrap()
            .get(&1, &())
            .unwrap(),
        Some(7)
    );
}
