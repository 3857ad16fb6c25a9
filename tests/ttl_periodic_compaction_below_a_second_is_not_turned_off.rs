//! `Cleanup::periodic_compaction`: "Every SST is compacted (and so filtered) at least this
//! often; zero turns it off". A non-zero period below one second (500 ms, 1 ns) is passed to
//! RocksDB as `periodic_compaction_seconds = as_secs() = 0`, which turns periodic compaction
//! off: the opposite of "at least every 500 ms", silently. It must round up to 1 s (or be
//! refused as `Error::InvalidOption`). The setting RocksDB runs with is read back from the
//! OPTIONS file it writes after each `SetOptions`.

use std::sync::Arc;
use std::time::Duration;

use rockstate::ttl::Cleanup;
use rockstate::{Error, KeyedBackend, ManualClock, StateDescriptor, TtlConfig};

/// `periodic_compaction_seconds` of column family `cf` in the newest OPTIONS file of `dir`.
fn periodic_seconds(dir: &std::path::Path, cf: &str) -> u64 {
    let newest = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("OPTIONS-"))
        .max_by_key(|n| n["OPTIONS-".len()..].parse::<u64>().unwrap())
        .unwrap();
    let text = std::fs::read_to_string(dir.join(newest)).unwrap();
    let section = format!("[CFOptions \"{}\"]", cf.replace(':', "\\:"));
    let body = &text[text.find(&section).expect("state column family") + section.len()..];
    let body = &body[..body.find("\n[").unwrap_or(body.len())];
    body.lines()
        .find_map(|l| l.trim().strip_prefix("periodic_compaction_seconds="))
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_periodic_compaction_below_a_second_is_not_turned_off() {
    let mut failures = Vec::new();
    for (i, period) in [
        Duration::from_secs(2),
        Duration::from_millis(500),
        Duration::from_nanos(1),
    ]
    .into_iter()
    .enumerate()
    {
        let dir = tempfile::tempdir().unwrap();
        let b = KeyedBackend::builder(dir.path())
            .clock(Arc::new(ManualClock::new(1_000)))
            .open()
            .unwrap();
        let name = format!("v{i}");
        let config = TtlConfig::new(Duration::from_secs(60)).cleanup(Cleanup {
            periodic_compaction: period,
            ..Cleanup::default()
        });
        match b.value_state::<u32, (), u32>(StateDescriptor::new(name.as_str()).with_ttl(config)) {
            Err(Error::InvalidOption { .. }) => continue,
            Err(e) => panic!("{period:?}: {e:?}"),
            Ok(_) => {}
        }
        let secs = periodic_seconds(dir.path(), &format!("state:{name}"));
        if secs == 0 {
            failures.push(format!(
                "periodic_compaction {period:?}: RocksDB runs with periodic_compaction_seconds=0 (off)"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
