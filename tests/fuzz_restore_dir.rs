//! Replays the committed seed corpus of the `restore_dir` fuzz target
//! (`fuzz/restore-dir/corpus/restore_dir/`) through the target's own body, so `cargo test`
//! runs every seed and every past finding: each restore of a mutated checkpoint directory is a
//! typed error or exactly the state of a completed checkpoint.

#[path = "../fuzz/restore-dir/harness.rs"]
mod harness;

#[test]
fn restore_dir_corpus_replays() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/restore-dir/corpus/restore_dir");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(
        files.len() >= 20,
        "seed corpus missing in {}",
        dir.display()
    );
    let mut outcomes = std::collections::BTreeMap::new();
    for f in files {
        let data = std::fs::read(&f).unwrap();
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        outcomes.insert(name, harness::run(&data));
    }
    let names = harness::fixture().file_names();
    eprintln!("{outcomes:?}\n{names:?}");
    // The unmutated directory restores; a flipped byte in any file of the newest checkpoint
    // (its manifest and private files, and every shared SST, all of which it references) is
    // always caught. Flips in the older checkpoint's private files are harmless to a restore
    // of the newest.
    assert_eq!(outcomes["none"], harness::Outcome::Restored);
    let mut checked = 0;
    for (name, outcome) in &outcomes {
        let Some(i) = name.strip_prefix("flip-") else {
            continue;
        };
        let file = names[i.parse::<usize>().unwrap() % names.len()];
        if file.starts_with("chk-2/") || file.starts_with("shared/") {
            assert_eq!(*outcome, harness::Outcome::Rejected, "{name} on {file}");
            checked += 1;
        }
    }
    assert!(
        checked >= 8,
        "only {checked} flips hit the newest checkpoint"
    );
}
