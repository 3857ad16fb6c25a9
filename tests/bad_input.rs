//! Bad input gets a typed error and changes nothing: keys outside the backend's key groups,
//! oversized values, states re-registered with another kind or codec, a database reopened with
//! another max parallelism, invalid options.

use rockstate::keygroup::key_group_of;
use rockstate::{CodecId, DbOptions, Error, KeyGroupRange, KeyedBackend};

fn key_in(range: KeyGroupRange, inside: bool) -> String {
    (0..)
        .map(|i| format!("k{i}"))
        .find(|k| range.contains(key_group_of(&postcard::to_stdvec(k).unwrap(), 128)) == inside)
        .unwrap()
}

#[test]
fn key_outside_range_is_refused_and_nothing_written() {
    let dir = tempfile::tempdir().unwrap();
    let range = KeyGroupRange::for_operator(128, 4, 1).unwrap();
    let b = KeyedBackend::builder(dir.path())
        .key_groups(range)
        .open()
        .unwrap();
    let v = b.value_state::<String, (), u64>("v").unwrap();
    let l = b.list_state::<String, (), u64>("l").unwrap();
    let m = b.map_state::<String, (), u8, u64>("m").unwrap();
    let outside = key_in(range, false);
    let inside = key_in(range, true);
    assert!(matches!(
        v.put(&outside, &(), &1),
        Err(Error::KeyGroupOutOfRange { .. })
    ));
    assert!(matches!(
        v.get(&outside, &()),
        Err(Error::KeyGroupOutOfRange { .. })
    ));
    assert!(matches!(
        l.add(&outside, &(), &1),
        Err(Error::KeyGroupOutOfRange { .. })
    ));
    assert!(matches!(
        m.put(&outside, &(), &1, &1),
        Err(Error::KeyGroupOutOfRange { .. })
    ));
    v.put(&inside, &(), &7).unwrap();
    assert_eq!(v.get(&inside, &()).unwrap(), Some(7));
    // Nor does a scan of a group another instance owns answer as if it were empty.
    let not_owned = (0..128u16).find(|g| !range.contains(*g)).unwrap();
    assert!(matches!(
        b.scan_key_group("v", not_owned, |_| Ok(true)),
        Err(Error::KeyGroupOutOfRange { .. })
    ));
    b.close().unwrap();
    // Every stored entry, read from the database itself.
    let opts = rocksdb::Options::default();
    let cfs = rocksdb::DB::list_cf(&opts, dir.path()).unwrap();
    let db = rocksdb::DB::open_cf_for_read_only(&opts, dir.path(), &cfs, false).unwrap();
    let mut entries = Vec::new();
    for cf in cfs.iter().filter(|c| c.starts_with("state:")) {
        let handle = db.cf_handle(cf).unwrap();
        for e in db.iterator_cf(&handle, rocksdb::IteratorMode::Start) {
            entries.push((cf.clone(), e.unwrap().0));
        }
    }
    assert_eq!(
        entries.len(),
        1,
        "only the in-range write landed: {entries:?}"
    );
}

#[test]
fn oversized_values_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let options = DbOptions {
        max_value_bytes: 1024,
        ..DbOptions::default()
    };
    let b = KeyedBackend::builder(dir.path())
        .options(options)
        .open()
        .unwrap();
    let raw = b.raw_value_state("raw", CodecId::new("bytes", 1)).unwrap();
    let big = vec![0u8; 1025];
    assert!(matches!(
        raw.put(b"k", b"", &big),
        Err(Error::ValueTooLarge { .. })
    ));
    assert_eq!(raw.get(b"k", b"").unwrap(), None);
    raw.put(b"k", b"", &big[..1024]).unwrap();
    let list = b.raw_list_state("list", CodecId::new("bytes", 1)).unwrap();
    assert!(matches!(
        list.add(b"k", b"", &big),
        Err(Error::ValueTooLarge { .. })
    ));
    assert!(matches!(
        list.add_all(b"k", b"", [&b"ok"[..], &big[..]]),
        Err(Error::ValueTooLarge { .. })
    ));
    assert!(
        list.get(b"k", b"").unwrap().is_empty(),
        "a failed add_all adds nothing"
    );
    let map = b.raw_map_state("map", CodecId::new("bytes", 1)).unwrap();
    assert!(matches!(
        map.put(b"k", b"", b"u", &big),
        Err(Error::ValueTooLarge { .. })
    ));
    let huge_key = vec![1u8; (1 << 20) + 1];
    assert!(matches!(
        raw.put(&huge_key, b"", b"v"),
        Err(Error::ValueTooLarge { .. })
    ));
    let typed = b.value_state::<String, (), Vec<u8>>("typed").unwrap();
    assert!(matches!(
        typed.put(&"k".into(), &(), &big),
        Err(Error::ValueTooLarge { .. })
    ));
}

#[test]
fn re_registration_with_other_kind_or_codec_is_refused_also_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let b = KeyedBackend::builder(dir.path()).open().unwrap();
        let v = b.value_state::<String, (), u64>("counts").unwrap();
        v.put(&"a".into(), &(), &3).unwrap();
        assert!(matches!(
            b.list_state::<String, (), u64>("counts"),
            Err(Error::StateMismatch { .. })
        ));
        assert!(matches!(
            b.value_state::<String, (), String>("counts"),
            Err(Error::StateMismatch { .. })
        ));
        b.close().unwrap();
    }
    let b = KeyedBackend::builder(dir.path()).open().unwrap();
    assert!(matches!(
        b.map_state::<String, (), u8, u64>("counts"),
        Err(Error::StateMismatch { .. })
    ));
    assert!(matches!(
        b.raw_value_state("counts", CodecId::new("other", 1)),
        Err(Error::StateMismatch { .. })
    ));
    let v = b.value_state::<String, (), u64>("counts").unwrap();
    assert_eq!(v.get(&"a".into(), &()).unwrap(), Some(3));
    let names: Vec<String> = b.states().unwrap().into_iter().map(|s| s.name).collect();
    assert_eq!(names, vec!["counts".to_string()]);
    assert!(matches!(
        b.value_state::<String, (), u64>(""),
        Err(Error::InvalidStateName(_))
    ));
}

#[test]
fn reopen_with_other_max_parallelism_or_range_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    KeyedBackend::builder(dir.path())
        .max_parallelism(256)
        .open()
        .unwrap()
        .close()
        .unwrap();
    assert!(matches!(
        KeyedBackend::builder(dir.path())
            .max_parallelism(128)
            .open(),
        Err(Error::BackendMismatch { .. })
    ));
    assert!(matches!(
        KeyedBackend::builder(dir.path())
            .max_parallelism(256)
            .key_groups(KeyGroupRange::new(0, 10).unwrap())
            .open(),
        Err(Error::BackendMismatch { .. })
    ));
    KeyedBackend::builder(dir.path())
        .max_parallelism(256)
        .open()
        .unwrap();
}

#[test]
fn invalid_configuration_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let bad = DbOptions {
        sst_format_version: 9,
        ..DbOptions::default()
    };
    assert!(matches!(
        KeyedBackend::builder(dir.path()).options(bad).open(),
        Err(Error::InvalidOption { .. })
    ));
    assert!(matches!(
        KeyedBackend::builder(dir.path()).max_parallelism(0).open(),
        Err(Error::InvalidKeyGroups(_))
    ));
    assert!(matches!(
        KeyedBackend::builder(dir.path())
            .max_parallelism(128)
            .key_groups(KeyGroupRange::new(0, 200).unwrap())
            .open(),
        Err(Error::InvalidKeyGroups(_))
    ));
}

#[test]
fn corrupt_stored_value_is_a_decode_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let b = KeyedBackend::builder(dir.path()).open().unwrap();
    // Write bytes that are not a valid postcard String through the raw view, then read typed.
    let typed = b.value_state::<String, (), String>("s").unwrap();
    let key = postcard::to_stdvec(&"k".to_string()).unwrap();
    typed.raw().put(&key, &[], &[200, 1]).unwrap();
    assert!(matches!(
        typed.get(&"k".into(), &()),
        Err(Error::Decode { .. })
    ));
}
