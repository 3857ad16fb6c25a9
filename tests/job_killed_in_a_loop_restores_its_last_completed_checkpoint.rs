//! A job process killed (SIGKILL) at random moments, cycle after cycle, restarted each time
//! from `RestoreFrom::Latest` through its coordinator's job records: plain incremental and
//! changelog mode, local recovery on and off, at a fixed parallelism and rescaling
//! 1 -> 2 -> 1 in the loop. After every kill: storage verifies and stays bounded, local disk
//! (backend directories and the staging root) stays bounded, and the next run restores
//! exactly the model of the last completed checkpoint (see `crash_loop_common`).
mod crash_loop_common;
use crash_loop_common::*;

#[test]
#[ignore = "child process"]
fn loop_child() {
    child_main();
}

#[test]
fn plain_local_recovery_on() {
    crash_loop(
        "loop_child",
        Mode {
            changelog: false,
            local_recovery: true,
        },
        30,
        |_| 2,
        1200,
        25,
    );
}
#[test]
fn plain_local_recovery_off() {
    crash_loop(
        "loop_child",
        Mode {
            changelog: false,
            local_recovery: false,
        },
        30,
        |_| 2,
        1200,
        25,
    );
}
#[test]
fn changelog_local_recovery_on() {
    crash_loop(
        "loop_child",
        Mode {
            changelog: true,
            local_recovery: true,
        },
        30,
        |_| 2,
        1200,
        25,
    );
}
#[test]
fn changelog_local_recovery_off() {
    crash_loop(
        "loop_child",
        Mode {
            changelog: true,
            local_recovery: false,
        },
        30,
        |_| 2,
        1200,
        25,
    );
}
#[test]
fn rescale_plain_local_recovery_on() {
    crash_loop(
        "loop_child",
        Mode {
            changelog: false,
            local_recovery: true,
        },
        32,
        one_two_one,
        1200,
        25,
    );
}
#[test]
fn rescale_changelog_local_recovery_on() {
    crash_loop(
        "loop_child",
        Mode {
            changelog: true,
            local_recovery: true,
        },
        32,
        one_two_one,
        1200,
        25,
    );
}
#[test]
fn rescale_plain_local_recovery_off() {
    crash_loop(
        "loop_child",
        Mode {
            changelog: false,
            local_recovery: false,
        },
        32,
        one_two_one,
        1200,
        25,
    );
}
#[test]
fn rescale_changelog_local_recovery_off() {
    crash_loop(
        "loop_child",
        Mode {
            changelog: true,
            local_recovery: false,
        },
        32,
        one_two_one,
        1200,
        25,
    );
}
