//! Quickstart: two operator instances share the key groups of a job; each writes keyed state,
//! closes, reopens, and reads it back. Run: `cargo run --release --example quickstart`.

use rockstate::keygroup::key_group_of;
use rockstate::{KeyGroupRange, KeyedBackend, Result};

fn main() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| rockstate::Error::Io {
        path: std::env::temp_dir(),
        source: e,
    })?;
    let max_parallelism = 128;
    let parallelism = 2;
    let users: Vec<String> = (0..10_000).map(|i| format!("user-{i}")).collect();

    for index in 0..parallelism {
        let range = KeyGroupRange::for_operator(max_parallelism, parallelism, index)?;
        let path = dir.path().join(format!("op-{index}"));
        let backend = KeyedBackend::builder(&path)
            .max_parallelism(max_parallelism)
            .key_groups(range)
            .open()?;
        let clicks = backend.value_state::<String, (), u64>("clicks")?;
        let per_ad = backend.map_state::<String, (), u32, u64>("clicks-per-ad")?;
        let mut mine = 0;
        for (i, user) in users.iter().enumerate() {
            let group = key_group_of(
                &postcard::to_stdvec(user).expect("strings encode"),
                max_parallelism,
            );
            if !range.contains(group) {
                continue; // another instance owns this key
            }
            mine += 1;
            let n = clicks.get(user, &())?.unwrap_or(0);
            clicks.put(user, &(), &(n + 1))?;
            let ad = (i % 7) as u32;
            let c = per_ad.get(user, &(), &ad)?.unwrap_or(0);
            per_ad.put(user, &(), &ad, &(c + 1))?;
        }
        // The database closes when the backend and every state handle are gone.
        drop((clicks, per_ad));
        backend.close()?;

        let backend = KeyedBackend::builder(&path)
            .max_parallelism(max_parallelism)
            .key_groups(range)
            .open()?;
        let clicks = backend.value_state::<String, (), u64>("clicks")?;
        let mut total = 0;
        for user in &users {
            match clicks.get(user, &()) {
                Ok(Some(n)) => total += n,
                Ok(None) => {}
                Err(rockstate::Error::KeyGroupOutOfRange { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        println!(
            "operator {index}/{parallelism}: key groups {range}, {mine} keys written, {total} clicks read back after reopen"
        );
        assert_eq!(total, mine);
    }
    println!("quickstart: OK");
    Ok(())
}
