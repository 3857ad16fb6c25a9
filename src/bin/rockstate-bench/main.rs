//! `rockstate-bench`: workloads that measure rockstate against raw RocksDB, its own
//! alternatives and its storage, printing ratios measured in the same run (machines are noisy;
//! only same-run ratios compare). `docs/decisions/` records what each figure decided.

mod bench_checkpoint;
mod bench_matrix;
mod bench_ops;
mod bench_rescale;
mod bench_s3;
mod bench_states;
mod bench_ttl;
mod chart;
#[path = "../rockstate/progress.rs"]
mod progress;
mod report;
mod support;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// rockstate-bench: benchmarks of rockstate that print ratios measured in the same run.
#[derive(Parser)]
#[command(name = "rockstate-bench", version, about)]
struct Cli {
    /// Print one JSON object per line (same fields) instead of key=value lines.
    #[arg(long, global = true)]
    json: bool,
    /// Leave RocksDB's compaction threads at normal CPU priority (by default the benchmarks
    /// call `rockstate::lower_compaction_priority` first, as an engine would on start-up).
    #[arg(long, global = true)]
    normal_priority_compaction: bool,
    #[command(subcommand)]
    which: BenchCommand,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Point operations through ValueState vs raw rust-rocksdb with identical options.
    Ops(bench_ops::OpsArgs),
    /// The ops phases over state fitting / beyond memory, uniform / Zipf keys, 100 B / 1 KiB
    /// values, plain / TTL, against raw rust-rocksdb on the same memory.
    Matrix(bench_matrix::MatrixArgs),
    /// Incremental, full and changelog checkpoints, against bare RocksDB checkpoint, parallel copy, cp -r.
    Checkpoint(bench_checkpoint::CheckpointArgs),
    /// TTL: bounded state under churn, compaction-filter cost, TTL access cost.
    Ttl(bench_ttl::TtlArgs),
    /// Rescale 1->2 and 2->1 vs plain restore, first checkpoint after a rescale, savepoints.
    Rescale(bench_rescale::RescaleArgs),
    /// S3 storage: upload/download throughput vs raw object_store on the same server.
    S3(bench_s3::S3Args),
    /// List and map state operations in the shape of Flink's own state benchmarks.
    States(bench_states::StatesArgs),
}

fn main() -> ExitCode {
    // Output piped into a reader that stops early (`| head`) ends the run quietly instead of
    // a panic in `println!` (Rust ignores SIGPIPE).
    // SAFETY: restores the default disposition of SIGPIPE before any other thread exists; no
    // handler runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    report::set_json(cli.json);
    if !cli.normal_priority_compaction {
        if let Err(e) = rockstate::lower_compaction_priority() {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    }
    let result = match cli.which {
        BenchCommand::Ops(args) => bench_ops::run(&args),
        BenchCommand::Matrix(args) => bench_matrix::run(&args),
        BenchCommand::Checkpoint(args) => bench_checkpoint::run(&args),
        BenchCommand::Ttl(args) => bench_ttl::run(&args),
        BenchCommand::Rescale(args) => bench_rescale::run(&args),
        BenchCommand::S3(args) => bench_s3::run(&args),
        BenchCommand::States(args) => bench_states::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
