//! Changelog mode: the log segments a backend cut stay in `<staging>/<backend>/log/` until a
//! completed materialization covers them. A backend reopened at once after `close` while the
//! closed backend's bookkeeping is still alive (a clone kept by another thread) must keep
//! its segments when a sibling backend opens on the same staging root later.

#[path = "checkpoint_common/mod.rs"]
mod common;

use common::*;
use rockstate::RestoreFrom;

#[test]
fn a_reopened_changelog_backends_log_survives_a_siblings_open() {
    let fx = Fixture::new();
    let opts = changelog_options(1000);
    let b = fx.open("a", opts.clone());
    let mut model = Model::new();
    let mut r = rng(4);
    random_writes(&b, &mut model, &mut r, 2000);
    let clone = b.clone();
    b.close().unwrap();
    let reopened = fx.open("a", opts.clone());
    drop(clone);
    random_writes(&reopened, &mut model, &mut r, 2000);
    let s1 = reopened.checkpoint(1).unwrap();
    reopened.notify_checkpoint_complete(1).unwrap();
    eprintln!("1 materialized: {}", s1.materialized);
    random_writes(&reopened, &mut model, &mut r, 500);
    let p2 = reopened.snapshot(2).unwrap();
    let _sibling = fx.open("b", opts.clone());
    let mut results = vec![p2.upload().map(|s| (s.checkpoint_id, s.materialized))];
    if results[0].is_ok() {
        reopened.notify_checkpoint_complete(2).unwrap();
    }
    for id in 3..=5 {
        random_writes(&reopened, &mut model, &mut r, 200);
        let res = reopened
            .checkpoint(id)
            .map(|s| (s.checkpoint_id, s.materialized));
        if res.is_ok() {
            reopened.notify_checkpoint_complete(id).unwrap();
        }
        results.push(res);
    }
    eprintln!("{results:?}");
    let restored = fx.restore("r", RestoreFrom::Latest).unwrap();
    let got = read_all(&restored);
    assert!(
        results.iter().all(|r| r.is_ok()) && got == model,
        "checkpoints after a sibling's open: {results:?}; restored state equals the model: {}",
        got == model
    );
}
