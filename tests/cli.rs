//! The operator commands, run as the built binary: `inspect`, `verify`, `gc`, `--help`, exit
//! codes and one-line errors, including a corrupted storage directory; and the output formats
//! of the `rockstate-bench` binary.

mod cli_fixture;

use std::process::{Command, Output};

use cli_fixture::{code, rockstate, stderr, stdout, Fixture};
use rockstate::checkpoint::layout;

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rockstate-bench"))
        .args(args)
        .output()
        .expect("run rockstate-bench")
}

#[test]
fn help_lists_the_commands_and_exit_codes() {
    let o = rockstate(&["--help"]);
    assert_eq!(code(&o), 0);
    let out = stdout(&o);
    for word in ["demo", "inspect", "verify", "gc", "Exit codes"] {
        assert!(out.contains(word), "{word} missing from:\n{out}");
    }
    // Benchmarks are their own binary: the operator's tool lists none.
    assert!(!out.contains("bench"), "{out}");
    let o = bench(&["--help"]);
    assert_eq!(code(&o), 0);
    for word in ["ops", "checkpoint", "ttl", "rescale", "s3", "--json"] {
        assert!(
            stdout(&o).contains(word),
            "{word} missing from:\n{}",
            stdout(&o)
        );
    }
    let o = rockstate(&["gc", "--help"]);
    assert!(stdout(&o).contains("--apply") && stdout(&o).contains("--min-age"));
}

#[test]
fn inspect_shows_checkpoints_reference_counts_and_savepoints() {
    let f = Fixture::new();
    let o = rockstate(&["inspect", f.arg()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("2 job record(s), 2 committed checkpoint(s)"),
        "{out}"
    );
    assert!(out.contains("states: count(value)"), "{out}");
    assert!(out.contains("key groups 0..=127 of 128"), "{out}");
    assert!(out.contains("job cli-test checkpoint 2"), "{out}");

    let o = rockstate(&["inspect", "--json", f.arg()]);
    assert_eq!(code(&o), 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let cps = v["checkpoints"].as_array().unwrap();
    assert_eq!(cps.len(), 2);
    // Shared SSTs reused by checkpoint 2 are referenced twice.
    let shared = v["shared"].as_array().unwrap();
    assert_eq!(shared.len(), f.objects("shared/").len());
    assert!(shared.iter().any(|s| s["references"] == 2), "{shared:?}");
    assert!(shared
        .iter()
        .all(|s| s["references"].as_u64().unwrap() >= 1));
    assert_eq!(
        v["job_records"][1]["tasks"][0]["manifest"],
        cps[1]["manifest"]
    );

    let sp = f.dir.path().join("sp.rssp");
    let o = rockstate(&["inspect", sp.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("300 entries"), "{}", stdout(&o));
    // The same savepoint named as a file:// URL.
    let o = rockstate(&["inspect", &format!("file://{}", sp.display())]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("300 entries"), "{}", stdout(&o));
    let o = rockstate(&["inspect", "--json", sp.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["entries"], 300, "{v}");
    assert_eq!(v["event_time_watermark_ms"], 0, "{v}");
}

#[test]
fn verify_passes_then_names_each_corrupted_file() {
    let f = Fixture::new();
    let o = rockstate(&["verify", f.arg()]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).starts_with("ok: 4 record(s)"), "{}", stdout(&o));

    // Flip one byte in a shared SST (same size: only the CRC can tell).
    let sst = f.objects("shared/")[0].clone();
    let path = f.storage.join(&sst);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[10] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    // Truncate a manifest.
    let first = f.objects("chk-1/")[0].clone();
    let meta = layout::metadata_name(1, first.split('/').nth(1).unwrap());
    let mpath = f.storage.join(&meta);
    let m = std::fs::read(&mpath).unwrap();
    std::fs::write(&mpath, &m[..m.len() / 2]).unwrap();

    let o = rockstate(&["verify", f.arg()]);
    assert_eq!(code(&o), 1);
    let out = stdout(&o);
    assert!(out.contains(&format!("BAD {sst}:")), "{out}");
    assert!(out.contains(&format!("BAD {meta}:")), "{out}");
    assert!(out.contains("FAILED"), "{out}");
    let o = rockstate(&["verify", "--json", f.arg()]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(code(&o), 1);

    // A missing referenced private file.
    let current = f
        .objects("chk-2/")
        .into_iter()
        .find(|n| n.ends_with("/CURRENT"))
        .unwrap();
    std::fs::remove_file(f.storage.join(&current)).unwrap();
    let o = rockstate(&["verify", f.arg()]);
    assert_eq!(code(&o), 1);
    assert!(
        stdout(&o).contains(&format!("BAD {current}:")),
        "{}",
        stdout(&o)
    );
}

#[test]
fn unusable_storage_arguments_fail_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    for (args, want) in [
        (vec!["verify", missing.to_str().unwrap()], 3),
        (vec!["inspect", "s3://bucket/prefix"], 3),
        (vec!["gc", "gs://bucket"], 2),
        (
            vec!["gc", "--min-age", "3w", dir.path().to_str().unwrap()],
            2,
        ),
        (vec!["frobnicate"], 2),
        (vec!["inspect", "file://"], 2),
    ] {
        let o = rockstate(&args);
        assert_eq!(code(&o), want, "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.starts_with("error:"), "{args:?}: {err}");
        assert!(
            !err.contains("panicked") && !err.contains("backtrace"),
            "{err}"
        );
        if want == 3 {
            assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        }
    }
    assert!(
        !missing.exists(),
        "verify must not create the storage directory"
    );
}

#[test]
fn gc_lists_by_default_and_deletes_only_garbage_with_apply() {
    let f = Fixture::new();
    let before = f.objects("");
    let orphan = format!("shared/{}.sst", "ab".repeat(16));
    std::fs::write(f.storage.join(&orphan), b"orphan").unwrap();
    let leftover = "chk-99/deadbeef/CURRENT";
    std::fs::create_dir_all(f.storage.join("chk-99/deadbeef")).unwrap();
    std::fs::write(f.storage.join(leftover), b"MANIFEST-000001\n").unwrap();

    // Young garbage is kept under the default minimum age.
    let o = rockstate(&["gc", f.arg()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("would delete 0 object(s)"),
        "{}",
        stdout(&o)
    );

    let o = rockstate(&["gc", "--min-age", "0s", f.arg()]);
    assert_eq!(code(&o), 0);
    let out = stdout(&o);
    assert!(out.contains(&format!("would delete {orphan}")), "{out}");
    assert!(out.contains(&format!("would delete {leftover}")), "{out}");
    assert!(out.contains("dry run"), "{out}");
    assert!(f.storage.join(&orphan).exists() && f.storage.join(leftover).exists());

    let o = rockstate(&["gc", "--min-age", "0s", "--apply", "--json", f.arg()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["deleted"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(f.objects(""), before, "exactly the garbage went");
    assert_eq!(code(&rockstate(&["verify", f.arg()])), 0);
}

#[test]
fn gc_refuses_while_a_manifest_is_undecodable() {
    let f = Fixture::new();
    let orphan = format!("shared/{}.sst", "cd".repeat(16));
    std::fs::write(f.storage.join(&orphan), b"orphan").unwrap();
    let meta = f
        .objects("chk-2/")
        .into_iter()
        .find(|n| n.ends_with("/_metadata"))
        .unwrap();
    std::fs::write(f.storage.join(&meta), b"RSTM garbage").unwrap();
    let before = f.objects("");
    let o = rockstate(&["gc", "--min-age", "0s", "--apply", f.arg()]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains(&meta), "{}", stderr(&o));
    assert_eq!(f.objects(""), before, "nothing deleted");
}

/// The demo's exactly-once verdict at fixed crash points: before the first checkpoint, just
/// after the first trigger (a started, uncommitted checkpoint: the job starts over), in the
/// middle, and at the last impression.
#[test]
fn demo_passes_at_fixed_crash_points() {
    for crash_at in ["1", "1001", "2500", "5999"] {
        let o = rockstate(&[SMALL_DEMO.as_slice(), &["--crash-at", crash_at]].concat());
        let out = stdout(&o);
        let last = out.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("verdict: PASS"),
            "crash at {crash_at}:\n{out}\n{}",
            stderr(&o)
        );
        assert!(last.contains("restores 1"), "{last}");
        assert_eq!(code(&o), 0);
    }
}

/// The small demo the tests run: 6000 impressions, checkpoints every 1000.
const SMALL_DEMO: [&str; 9] = [
    "demo",
    "--impressions",
    "6000",
    "--users",
    "100",
    "--ads",
    "5",
    "--checkpoint-every",
    "1000",
];

/// Runs a small demo crashing after `crash_at` impressions with 3 keyed tasks and 2 sources,
/// restored at `keyed` keyed tasks and `sources` sources.
fn demo_rescaled(crash_at: &str, keyed: &str, sources: &str) -> Output {
    rockstate(
        &[
            SMALL_DEMO.as_slice(),
            &[
                "--parallelism",
                "3",
                "--sources",
                "2",
                "--crash-at",
                crash_at,
                "--rescale-to",
                keyed,
                "--rescale-sources-to",
                sources,
            ],
        ]
        .concat(),
    )
}

/// Exactly-once across a restore at another parallelism: keyed state is restored from the
/// overlapping manifests, source offsets and pending sink transactions are redistributed.
#[test]
fn demo_passes_when_restored_at_another_parallelism() {
    for (crash_at, keyed, sources) in [("2500", "2", "2"), ("3500", "4", "3"), ("5999", "4", "1")] {
        let o = demo_rescaled(crash_at, keyed, sources);
        let out = stdout(&o);
        let last = out.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("verdict: PASS"),
            "crash at {crash_at}, 3 -> {keyed}:\n{out}\n{}",
            stderr(&o)
        );
        assert!(
            last.contains(&format!(
                "restores 1, keyed tasks 3 -> {keyed}, sources 2 -> {sources}"
            )),
            "{last}"
        );
        // Restored from a checkpoint, not started over: sources emit past `2 × every` only
        // after checkpoint 1 completed.
        assert!(
            !stderr(&o).contains("restoring from checkpoint none"),
            "{}",
            stderr(&o)
        );
        assert_eq!(code(&o), 0);
    }
}

#[test]
fn demo_rejects_a_zero_parallelism() {
    let o = demo_rescaled("2500", "0", "2");
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).starts_with("error: "), "{}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
}

/// A checkpoint every 0 impressions is a usage error, not a checkpoint per impression.
#[test]
fn demo_rejects_a_checkpoint_every_zero_impressions() {
    let o = rockstate(&["demo", "--impressions", "100", "--checkpoint-every", "0"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("--checkpoint-every"), "{}", stderr(&o));
}

/// `--changelog`: the crash loop in changelog mode passes; settings that are not a JSON
/// object of the changelog options, or out of range, are a usage error naming the flag.
#[test]
fn demo_runs_in_changelog_mode_and_rejects_bad_changelog_settings() {
    let settings = r#"{"materialize_log_percent":20,"materialize_min_log_bytes":0}"#;
    let o = rockstate(
        &[
            SMALL_DEMO.as_slice(),
            &[
                "--crashes",
                "3",
                "--crash-seed",
                "5",
                "--changelog",
                settings,
            ],
        ]
        .concat(),
    );
    let out = stdout(&o);
    let last = out.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("verdict: PASS") && !last.contains("restores 0"),
        "{out}\n{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("checkpoints in changelog mode"));
    assert_eq!(code(&o), 0);

    for bad in [
        r#"{"materialize_log_percent":"#,
        r#"{"max_log_buffer_bytes":1}"#,
    ] {
        let o = rockstate(&[SMALL_DEMO.as_slice(), &["--changelog", bad]].concat());
        assert_eq!(code(&o), 2, "{bad}: {}", stderr(&o));
        assert!(stderr(&o).contains("--changelog"), "{}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    }
}

/// `bench checkpoint --json --svg`: one JSON object per line with the text format's fields,
/// and a chart with one bar per checkpoint of each mode.
#[test]
fn bench_checkpoint_prints_json_lines_and_an_svg_chart() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("uploaded.svg");
    let o = bench(&[
        "checkpoint",
        "--keys",
        "2000",
        "--rounds",
        "2",
        "--json",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let lines: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let uploaded = |mode: &str| -> Vec<u64> {
        lines
            .iter()
            .filter(|v| v["mode"] == mode && v["checkpoint"].is_u64())
            .map(|v| v["uploaded_bytes"].as_u64().unwrap())
            .collect()
    };
    let (inc, full) = (uploaded("incremental"), uploaded("full"));
    assert!(inc.len() >= 6 && full.len() >= 6, "{inc:?} {full:?}");
    // cp6 (a round updating 1% of the keys): incremental uploads less than full.
    assert!(inc[5] < full[5], "{inc:?} {full:?}");
    for key in [
        "sync_ms",
        "async_ms",
        "uploaded_files",
        "reused_files",
        "state_bytes",
    ] {
        assert!(lines.iter().any(|v| v[key].is_number()), "{key}");
    }
    assert!(lines
        .iter()
        .any(|v| v["line"] == "restore" && v["throughput_ratio"].is_number()));
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(chart.starts_with("<svg") && chart.trim_end().ends_with("</svg>"));
    for (mode, n) in [("incremental", 6), ("full", 6)] {
        for i in 1..=n {
            assert!(
                chart.contains(&format!("<title>checkpoint {i} {mode}: ")),
                "{mode} {i}"
            );
        }
    }
}

#[test]
fn bench_lines_are_key_value_text_without_json() {
    let o = bench(&[
        "ttl",
        "--rounds",
        "1",
        "--keys-per-round",
        "200",
        "--access-keys",
        "200",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("# bench ttl churn: rounds=1 "), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("round=1 ttl_live_sst_bytes=")),
        "{out}"
    );
    assert!(!out.contains('{'), "{out}");
}

#[test]
fn bench_matrix_runs_the_selected_cells_and_summarizes_each_phase() {
    let o = bench(&[
        "matrix",
        "--rounds",
        "2",
        "--budget-mib",
        "8",
        "--fits",
        "0.05",
        "--beyond",
        "0.1",
        "--ops",
        "300",
        "--only",
        "uniform/100B",
        "--same-layout",
        "--compact-before-reads",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    // Compacted before the reads: both stores' files lie in one level, none in level 0.
    for l in out
        .lines()
        .filter(|l| l.starts_with("round=") && l.contains(" phase=get "))
    {
        for field in ["files_before=", "raw_files_before="] {
            let files = l
                .split(' ')
                .find_map(|w| w.strip_prefix(field))
                .unwrap_or_else(|| panic!("no {field}: {l}"));
            assert!(files.starts_with('L') && !files.contains("L0:"), "{l}");
        }
    }
    let cells = [
        "fits/uniform/100B/plain",
        "fits/uniform/100B/ttl",
        "beyond/uniform/100B/plain",
        "beyond/uniform/100B/ttl",
    ];
    let phases = [
        "insert",
        "update",
        "get",
        "get_missing",
        "read_modify_write",
    ];
    for cell in cells {
        for phase in phases {
            let rounds = out
                .lines()
                .filter(|l| {
                    l.starts_with("round=")
                        && l.contains(&format!(" cell={cell} "))
                        && l.contains(&format!(" phase={phase} "))
                })
                .count();
            assert_eq!(rounds, 2, "{cell} {phase}: {out}");
            assert!(
                out.lines()
                    .filter(|l| l.starts_with("round=") && l.contains(&format!(" cell={cell} ")))
                    .all(|l| l.contains(" layout_ratio=")),
                "{cell}: --same-layout printed no layout_ratio: {out}"
            );
            let median = out
                .lines()
                .find(|l| l.starts_with(&format!("median cell={cell} phase={phase} ")))
                .unwrap_or_else(|| panic!("no summary of {cell} {phase}: {out}"));
            let ratio: f64 = median
                .split(' ')
                .find_map(|f| f.strip_prefix("ratio="))
                .and_then(|r| r.parse().ok())
                .unwrap_or_else(|| panic!("no ratio in {median}"));
            assert!(ratio.is_finite() && ratio > 0.0, "{median}");
        }
    }
    assert!(!out.contains("/1024B/"), "--only kept a 1 KiB cell: {out}");
}

#[test]
fn bench_ops_runs_a_ttl_state_with_fewer_operations_than_keys() {
    let o = bench(&[
        "ops",
        "--solo-only",
        "--no-reference",
        "--keys",
        "2000",
        "--ops",
        "100",
        "--ttl",
        "--insert-order",
        "ascending",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains(" insert_order=ascending ops=100 ttl=week "),
        "{out}"
    );
    assert_eq!(
        out.lines().filter(|l| l.starts_with("solo_phase=")).count(),
        5,
        "{out}"
    );
}

/// The job namespace a demo run printed (`jobs/<id>`).
fn demo_job_prefix(o: &Output) -> String {
    let err = stderr(o);
    let start = err.find("jobs/").expect("the demo names its job namespace");
    let rest = &err[start..];
    let end = rest.find('/').map(|i| {
        let after = &rest[i + 1..];
        i + 1 + after.find('/').unwrap_or(after.len())
    });
    rest[..end.unwrap_or(rest.len())].to_string()
}

/// Two runs on one storage are two jobs: the second neither hangs on nor restores the
/// first's checkpoints, and each run's namespace verifies on its own.
#[test]
fn demo_runs_twice_on_one_storage() {
    let dir = tempfile::tempdir().unwrap();
    let storage = dir.path().join("shared-storage");
    let arg = storage.to_str().unwrap();
    let mut prefixes = Vec::new();
    for run in 0..2 {
        let o = rockstate(
            &[
                SMALL_DEMO.as_slice(),
                &["--crash-at", "2500", "--storage", arg],
            ]
            .concat(),
        );
        let out = stdout(&o);
        assert!(
            out.lines()
                .last()
                .unwrap_or_default()
                .starts_with("verdict: PASS"),
            "run {run}:\n{out}\n{}",
            stderr(&o)
        );
        let prefix = demo_job_prefix(&o);
        let v = rockstate(&["verify", storage.join(&prefix).to_str().unwrap()]);
        assert_eq!(code(&v), 0, "{}{}", stdout(&v), stderr(&v));
        prefixes.push(prefix);
    }
    assert_ne!(prefixes[0], prefixes[1]);
}

/// Several crashes, each restore but the first at a random parallelism: exactly-once, and
/// storage bounded after every crash.
#[test]
fn demo_with_many_crashes_stays_exactly_once_and_bounded() {
    let o = rockstate(&[
        "demo",
        "--impressions",
        "6000",
        "--users",
        "100",
        "--ads",
        "5",
        "--crashes",
        "5",
        "--crash-seed",
        "11",
    ]);
    let out = stdout(&o);
    let last = out.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("verdict: PASS")
            && last.contains("restores 5")
            && last.contains("storage bounded"),
        "{out}\n{}",
        stderr(&o)
    );
    assert_eq!(code(&o), 0);
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    let f = Fixture::new();
    for args in [vec!["verify", "--json", f.arg()], vec!["inspect", f.arg()]] {
        // A reader that has gone before the first line (`| head -0`): every write fails.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let o = Command::new(env!("CARGO_BIN_EXE_rockstate"))
            .args(&args)
            .stdout(writer)
            .output()
            .unwrap();
        assert!(!stderr(&o).contains("panicked"), "{args:?}: {}", stderr(&o));
    }
}
