//! `docs/checkpoint-format.md` §6: `rockstate gc` "runs the same classification with a
//! minimum age: besides what a pass deletes, ... plus the storage's stale temporaries".
//! A put that died between writing `<root>/.tmp/<random>` and linking it leaves that
//! temporary behind (a crash mid-upload). `gc --apply` must remove it once `--min-age` old
//! (as `JobOwner::sweep` does through `sweep_incomplete`), and its dry run must list it.

mod cli_fixture;

use std::time::{Duration, UNIX_EPOCH};

use rockstate::{Clock, SystemClock};

use cli_fixture::{code, rockstate, stderr, stdout, Fixture};

#[test]
fn gc_apply_removes_a_two_day_old_temporary_of_a_put_that_died() {
    let f = Fixture::new();
    let tmp_dir = f.storage.join(".tmp");
    std::fs::create_dir_all(&tmp_dir).unwrap();
    // What `LocalStorage::put_with` leaves when the process dies before its link.
    let stale = tmp_dir.join(format!("{:032x}", 0x5eed_u128));
    std::fs::write(&stale, vec![7u8; 64 << 10]).unwrap();
    // The tool ages temporaries by the wall clock.
    let two_days_ago =
        UNIX_EPOCH + Duration::from_millis(SystemClock.now_ms()) - Duration::from_secs(2 * 86_400);
    std::fs::File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(two_days_ago)
        .unwrap();

    let o = rockstate(&["gc", "--apply", "--min-age", "1h", f.arg()]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(
        !stale.exists(),
        "gc --apply left the 2-day-old temporary {} of an unfinished put; output:\n{}",
        stale.display(),
        stdout(&o)
    );
    assert_eq!(code(&rockstate(&["verify", f.arg()])), 0);
}
