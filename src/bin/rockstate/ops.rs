//! The operator commands `inspect`, `verify` and `gc` on a checkpoint storage, their exit
//! codes and their human and `--json` output.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rockstate::catalog::{self, Catalog, GcReason};
use rockstate::{Clock, StateKind, SystemClock};
use serde_json::{json, Value};

use crate::progress::human_bytes;
use crate::storage_arg;

/// Exit code: success, nothing wrong.
pub const EXIT_OK: u8 = 0;
/// Exit code: the command ran and found problems (corrupt or missing files, undecodable
/// manifests; `gc` refusing because references are unknown).
pub const EXIT_PROBLEMS: u8 = 1;
/// Exit code: bad command line (also clap's own).
pub const EXIT_USAGE: u8 = 2;
/// Exit code: the storage (or a file) could not be read at all.
pub const EXIT_STORAGE: u8 = 3;

/// Text appended to `--help`.
pub const EXIT_CODES_HELP: &str = "Exit codes: 0 ok; 1 problems found (verify) or gc refused; \
2 bad command line; 3 storage or file unreadable.\n\
STORAGE is a directory, file:///dir, or s3://bucket/prefix (endpoint and credentials from \
AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION).";

/// A failed command: one line for stderr and an exit code.
#[derive(Debug)]
pub struct CliError {
    /// Exit code.
    pub code: u8,
    /// One-line message.
    pub message: String,
}

impl CliError {
    /// A bad argument.
    pub fn usage(message: impl Into<String>) -> Self {
        CliError {
            code: EXIT_USAGE,
            message: message.into(),
        }
    }

    /// Storage not readable.
    pub fn storage(message: impl Into<String>) -> Self {
        CliError {
            code: EXIT_STORAGE,
            message: message.into(),
        }
    }
}

impl From<rockstate::Error> for CliError {
    fn from(e: rockstate::Error) -> Self {
        CliError::storage(e.to_string())
    }
}

/// Prints `error: …` (one line) and turns a result into the process exit code.
pub fn finish(result: Result<u8, CliError>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {}", e.message.replace('\n', " "));
            ExitCode::from(e.code)
        }
    }
}

/// Parses `90s`, `15m`, `2h`, `1d` or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, ""), |i| s.split_at(i));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration like 90s, 15m, 2h, 1d"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        "d" => n.saturating_mul(86_400),
        _ => return Err(format!("unknown duration unit in `{s}` (use s, m, h or d)")),
    };
    Ok(Duration::from_secs(secs))
}

fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

fn kind_name(k: StateKind) -> &'static str {
    match k {
        StateKind::Value => "value",
        StateKind::List => "list",
        StateKind::Map => "map",
        StateKind::Reducing => "reducing",
        StateKind::Aggregating => "aggregating",
    }
}

fn age(t: SystemTime) -> String {
    let then = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let secs = SystemClock.now_ms().saturating_sub(then) / 1000;
    match secs {
        s if s >= 86_400 => format!("{}d", s / 86_400),
        s if s >= 3600 => format!("{}h", s / 3600),
        s if s >= 60 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// Arguments of `inspect`.
#[derive(clap::Args, Debug)]
pub struct InspectArgs {
    /// Checkpoint storage (directory, file://, s3://), or a savepoint file.
    storage: String,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// `rockstate inspect`.
pub fn inspect(args: &InspectArgs) -> Result<u8, CliError> {
    // A savepoint file, named as a path or a file:// URL.
    if let Ok(storage_arg::StorageUrl::Local(path)) = storage_arg::parse(&args.storage) {
        if path.is_file() {
            return inspect_savepoint(&path, args.json);
        }
    }
    let storage = storage_arg::open(&args.storage)?;
    let cat = Catalog::load(storage.as_ref())?;
    let checkpoints: Vec<Value> = cat
        .checkpoints
        .iter()
        .map(|c| {
            let m = &c.manifest;
            json!({
                "manifest": c.name, "checkpoint_id": m.checkpoint_id, "backend_id": m.backend_id,
                "key_groups": [m.key_group_start, m.key_group_end],
                "max_parallelism": m.max_parallelism,
                "states": m.states.iter().map(|s| json!({
                    "name": s.name, "kind": kind_name(s.kind), "ttl": s.ttl,
                    "codec": s.codec, "codec_version": s.codec_version})).collect::<Vec<_>>(),
                "shared_files": m.shared_files.len(),
                "shared_bytes": m.shared_files.iter().map(|f| f.size).sum::<u64>(),
                "private_files": m.private_files.len(),
                "private_bytes": m.private_files.iter().map(|f| f.size).sum::<u64>(),
                "state_bytes": c.state_bytes(), "manifest_bytes": c.manifest_bytes,
                "operator_states": m.operator_state.iter().map(|o| &o.name).collect::<Vec<_>>(),
                "created_at_ms": m.created_at_ms,
            })
        })
        .collect();
    let jobs: Vec<Value> = cat
        .job_records
        .iter()
        .map(|j| match &j.record {
            Ok(r) => json!({"name": j.name, "checkpoint_id": r.checkpoint_id, "job": r.job_name,
                "tasks": r.tasks.iter().map(|t| json!({"task": t.task, "manifest": t.manifest,
                    "key_groups": [t.key_group_start, t.key_group_end],
                    "state_bytes": t.state_bytes, "bytes_uploaded": t.bytes_uploaded,
                    "files_reused": t.files_reused, "sync_micros": t.sync_micros,
                    "async_micros": t.async_micros})).collect::<Vec<_>>()}),
            Err(e) => json!({"name": j.name, "error": e}),
        })
        .collect();
    let shared_bytes: u64 = cat.shared.iter().map(|s| s.info.size).sum();
    if args.json {
        print_json(&json!({
            "job_records": jobs, "checkpoints": checkpoints,
            "void_records": cat.void_records.iter().map(|v| json!({"name": v.info.name, "checkpoint_id": v.id, "voided_at_ms": v.voided_at_ms})).collect::<Vec<_>>(),
            "bad_manifests": cat.bad_manifests.iter().map(|(n, e)| json!({"manifest": n, "error": e})).collect::<Vec<_>>(),
            "shared": cat.shared.iter().map(|s| json!({"name": s.info.name, "bytes": s.info.size, "references": s.references})).collect::<Vec<_>>(),
            "uncommitted": cat.uncommitted.iter().map(|d| json!({"checkpoint_id": d.id, "backend_id": d.backend_id, "objects": d.objects.len()})).collect::<Vec<_>>(),
            "other": cat.other.iter().map(|o| &o.name).collect::<Vec<_>>(),
        }));
        return Ok(EXIT_OK);
    }
    println!(
        "{}: {} job record(s), {} committed checkpoint(s), {} shared file(s) ({}), {} uncommitted dir(s)",
        args.storage,
        cat.job_records.len(),
        cat.checkpoints.len(),
        cat.shared.len(),
        human_bytes(shared_bytes),
        cat.uncommitted.len()
    );
    for j in &cat.job_records {
        match &j.record {
            Ok(r) => println!(
                "job {} checkpoint {}: {} task(s), {} state, {} uploaded",
                r.job_name,
                r.checkpoint_id,
                r.tasks.len(),
                human_bytes(r.tasks.iter().map(|t| t.state_bytes).sum()),
                human_bytes(r.tasks.iter().map(|t| t.bytes_uploaded).sum()),
            ),
            Err(e) => println!("job record {}: UNREADABLE: {e}", j.name),
        }
    }
    for v in &cat.void_records {
        println!(
            "void record {}: checkpoint {} was abandoned (voided at {} ms)",
            v.info.name, v.id, v.voided_at_ms
        );
    }
    for c in &cat.checkpoints {
        let m = &c.manifest;
        let states: Vec<String> = m
            .states
            .iter()
            .map(|s| {
                format!(
                    "{}({}{})",
                    s.name,
                    kind_name(s.kind),
                    if s.ttl { ", ttl" } else { "" }
                )
            })
            .collect();
        println!(
            "checkpoint {} backend {}: key groups {}..={} of {}, state {}, {} shared + {} private file(s), manifest {}",
            m.checkpoint_id,
            m.backend_id,
            m.key_group_start,
            m.key_group_end,
            m.max_parallelism,
            human_bytes(c.state_bytes()),
            m.shared_files.len(),
            m.private_files.len(),
            human_bytes(c.manifest_bytes),
        );
        println!("  states: {}", states.join(", "));
    }
    for (n, e) in &cat.bad_manifests {
        println!("manifest {n}: UNREADABLE: {e}");
    }
    for s in &cat.shared {
        println!(
            "  {}  {}  refs {}  age {}",
            s.info.name,
            human_bytes(s.info.size),
            s.references,
            age(s.info.last_modified)
        );
    }
    for d in &cat.uncommitted {
        println!(
            "uncommitted chk-{}/{}: {} object(s)",
            d.id,
            d.backend_id,
            d.objects.len()
        );
    }
    for o in &cat.other {
        println!("other object {} ({})", o.name, human_bytes(o.size));
    }
    Ok(EXIT_OK)
}

fn inspect_savepoint(path: &Path, json_out: bool) -> Result<u8, CliError> {
    let open = || {
        std::fs::File::open(path).map_err(|e| CliError::storage(format!("{}: {e}", path.display())))
    };
    let reader =
        sst_format::SavepointReader::open(std::io::BufReader::new(open()?)).map_err(|e| {
            CliError {
                code: EXIT_PROBLEMS,
                message: format!("{}: not a readable savepoint: {e}", path.display()),
            }
        })?;
    let h = reader.header();
    let entries: u64 = reader.index().iter().map(|i| u64::from(i.entries)).sum();
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if json_out {
        print_json(&json!({
            "savepoint": path.display().to_string(), "bytes": size,
            "key_groups": [h.key_group_start, h.key_group_end], "max_parallelism": h.max_parallelism,
            "states": h.states.iter().map(|s| json!({"name": s.name, "kind": kind_name(s.kind), "ttl": s.ttl})).collect::<Vec<_>>(),
            "key_group_blocks": reader.index().len(), "entries": entries,
            "operator_states": h.operator_state.iter().map(|o| &o.name).collect::<Vec<_>>(),
            "created_at_ms": h.created_at_ms, "event_time_watermark_ms": h.event_time_watermark_ms,
        }));
    } else {
        println!(
            "savepoint {}: {}, key groups {}..={} of {}, {} block(s), {} entries",
            path.display(),
            human_bytes(size),
            h.key_group_start,
            h.key_group_end,
            h.max_parallelism,
            reader.index().len(),
            entries
        );
        for s in &h.states {
            println!(
                "  state {} ({}{})",
                s.name,
                kind_name(s.kind),
                if s.ttl { ", ttl" } else { "" }
            );
        }
    }
    Ok(EXIT_OK)
}

/// Arguments of `verify`.
#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// Checkpoint storage (directory, file://, s3://), or a savepoint file.
    storage: String,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// `rockstate verify`: exit 1 if any problem was found. A savepoint file (a path or a
/// file:// URL naming a file) is read whole: header, index and every block's checksum and
/// entries.
pub fn verify(args: &VerifyArgs) -> Result<u8, CliError> {
    if let Ok(storage_arg::StorageUrl::Local(path)) = storage_arg::parse(&args.storage) {
        if path.is_file() {
            return verify_savepoint(&path, args.json);
        }
    }
    let storage = storage_arg::open(&args.storage)?;
    let cat = Catalog::load(storage.as_ref())?;
    let mut v = catalog::verify(storage.as_ref(), &cat)?;
    if v.records == 0 && cat.bad_manifests.is_empty() && !cat.other.is_empty() {
        v.problems.push(catalog::Problem {
            file: args.storage.clone(),
            detail: format!(
                "no job record or checkpoint, {} object(s) of no checkpoint name (a job's \
                 checkpoints are under jobs/<job id>/ of the storage its run was given)",
                cat.other.len()
            ),
        });
    }
    let code = if v.problems.is_empty() {
        EXIT_OK
    } else {
        EXIT_PROBLEMS
    };
    if args.json {
        print_json(&json!({
            "ok": v.problems.is_empty(), "records": v.records, "files_checked": v.files_checked,
            "bytes_checked": v.bytes_checked,
            "problems": v.problems.iter().map(|p| json!({"file": p.file, "problem": p.detail})).collect::<Vec<_>>(),
        }));
        return Ok(code);
    }
    for p in &v.problems {
        println!("BAD {}: {}", p.file, p.detail);
    }
    println!(
        "{}: {} record(s), {} file(s) ({}) checked, {} problem(s)",
        if v.problems.is_empty() {
            "ok"
        } else {
            "FAILED"
        },
        v.records,
        v.files_checked,
        human_bytes(v.bytes_checked),
        v.problems.len()
    );
    Ok(code)
}

fn verify_savepoint(path: &Path, json_out: bool) -> Result<u8, CliError> {
    // Everything a restore checks before it writes anything: structure and checksums, and
    // each entry against its key group and state.
    let verified = rockstate::savepoint::verify_file(path);
    // An I/O error reading the file is no verdict on its bytes.
    if let Err(e) = &verified {
        use rockstate::ErrorKind as K;
        if matches!(e.kind(), K::Io | K::NotFound | K::Transient) {
            return Err(CliError::storage(format!("{}: {e}", path.display())));
        }
    }
    let code = if verified.is_ok() {
        EXIT_OK
    } else {
        EXIT_PROBLEMS
    };
    if json_out {
        print_json(&match &verified {
            Ok(s) => json!({
                "ok": true, "savepoint": path.display().to_string(), "blocks": s.blocks,
                "entries": s.entries, "raw_bytes": s.raw_bytes, "bytes": s.file_bytes,
            }),
            Err(e) => json!({
                "ok": false, "savepoint": path.display().to_string(),
                "problems": [{"file": path.display().to_string(), "problem": e.to_string()}],
            }),
        });
        return Ok(code);
    }
    match &verified {
        Ok(s) => println!(
            "ok: savepoint {}: {} block(s), {} entries, {} raw, {}",
            path.display(),
            s.blocks,
            s.entries,
            human_bytes(s.raw_bytes),
            human_bytes(s.file_bytes)
        ),
        Err(e) => println!("BAD {}: {e}", path.display()),
    }
    Ok(code)
}

/// Arguments of `gc`.
#[derive(clap::Args, Debug)]
pub struct GcArgs {
    /// Checkpoint storage (directory, file://, s3://).
    storage: String,
    /// Delete (without it, only list what would be deleted).
    #[arg(long)]
    apply: bool,
    /// Keep garbage younger than this (it may belong to a checkpoint in flight): 90s, 15m, 2h, 1d.
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    min_age: Duration,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// `rockstate gc`: dry run unless `--apply`. The library's garbage classification
/// (`catalog::classify`) keeping every job record: never deletes what a completed, pending or
/// pinned checkpoint needs; refuses (exit 1) while such a manifest or a job record cannot be
/// decoded.
pub fn gc(args: &GcArgs) -> Result<u8, CliError> {
    let storage = storage_arg::open(&args.storage)?;
    let cat = Catalog::load(storage.as_ref())?;
    let now_ms = SystemClock.now_ms();
    let plan = catalog::gc_plan(&cat, args.min_age, now_ms).map_err(|e| CliError {
        code: EXIT_PROBLEMS,
        message: e.to_string(),
    })?;
    let (deleted, stopped_by, incomplete) = if args.apply {
        let applied = catalog::gc_apply(storage.as_ref(), &plan)?;
        // Temporaries of puts that never finished (a process killed mid-upload), as the
        // job owner's sweep removes them; not after a failed delete.
        let incomplete = match applied.stopped_by {
            None => Some(storage.sweep_incomplete(now_ms, args.min_age)?),
            Some(_) => None,
        };
        (Some(applied.deleted), applied.stopped_by, incomplete)
    } else {
        (None, None, None)
    };
    let code = if stopped_by.is_some() {
        EXIT_STORAGE
    } else {
        EXIT_OK
    };
    let why = |r: GcReason| match r {
        GcReason::SubsumedRecord => "subsumed job record",
        GcReason::AbandonedRecord => "job record of an aborted checkpoint",
        GcReason::Finished => "checkpoint of a finished id",
        GcReason::Uncommitted => "uncommitted checkpoint",
        GcReason::FinishedShared => "shared file of a finished id",
        GcReason::UnreferencedShared => "unreferenced shared file",
        GcReason::ExpiredPin => "expired restore pin",
        GcReason::ExpiredVoid => "void record of an aborted checkpoint, aged",
        _ => "garbage",
    };
    if args.json {
        print_json(&json!({
            "applied": args.apply,
            "candidates": plan.delete.iter().map(|(o, r)| json!({"name": o.name, "bytes": o.size, "reason": why(*r)})).collect::<Vec<_>>(),
            "deleted": deleted.as_ref().map(|d| d.iter().map(|o| &o.name).collect::<Vec<_>>()),
            "kept_too_young": plan.too_young.iter().map(|o| &o.name).collect::<Vec<_>>(),
            "incomplete_removed": incomplete,
            "error": stopped_by.as_ref().map(|e| e.to_string()),
            "now_ms": now_ms,
        }));
        return Ok(code);
    }
    let verb = if args.apply {
        "deleted"
    } else {
        "would delete"
    };
    let listed: Vec<(&str, u64, &str)> = match &deleted {
        Some(d) => d
            .iter()
            .map(|o| {
                let r = plan
                    .delete
                    .iter()
                    .find(|(p, _)| p.name == o.name)
                    .map_or("", |(_, r)| why(*r));
                (o.name.as_str(), o.size, r)
            })
            .collect(),
        None => plan
            .delete
            .iter()
            .map(|(o, r)| (o.name.as_str(), o.size, why(*r)))
            .collect(),
    };
    for (name, size, r) in &listed {
        println!("{verb} {name} ({}, {r})", human_bytes(*size));
    }
    println!(
        "{verb} {} object(s), {}; kept {} younger than {}s{}",
        listed.len(),
        human_bytes(listed.iter().map(|l| l.1).sum()),
        plan.too_young.len(),
        args.min_age.as_secs(),
        if args.apply {
            ""
        } else {
            " (dry run: pass --apply to delete)"
        }
    );
    if let Some(n) = incomplete {
        println!(
            "removed {n} leftover(s) of unfinished puts (temporary objects, multipart uploads)"
        );
    }
    if let Some(e) = stopped_by {
        eprintln!("error: stopped at a failed delete: {e}");
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_durations() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert!(parse_duration("1w").is_err());
        assert!(parse_duration("h").is_err());
    }
}
