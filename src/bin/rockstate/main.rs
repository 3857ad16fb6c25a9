//! The `rockstate` command line: workloads that measure the backend against raw RocksDB.

mod bench_checkpoint;
mod bench_ops;
mod bench_rescale;
mod bench_s3;
mod bench_ttl;
mod chart;
mod demo;
mod ops;
mod progress;
mod report;
mod storage_arg;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// rockstate: keyed stream-processing state on RocksDB.
#[derive(Parser)]
#[command(name = "rockstate", version, about, after_help = ops::EXIT_CODES_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The frequency-capping job: checkpoints through the coordinator, a crash, a restore
    /// from the newest job record, and an exactly-once comparison with a crash-free run.
    /// Prints `verdict: PASS …` or `verdict: FAIL …` last (exit 0 only on PASS).
    #[command(after_help = ops::EXIT_CODES_HELP)]
    Demo(demo::DemoArgs),
    /// Show a checkpoint storage: job records, checkpoints (states, key-group ranges, files,
    /// sizes), shared files with reference counts, uncommitted directories; or a savepoint file.
    #[command(after_help = ops::EXIT_CODES_HELP)]
    Inspect(ops::InspectArgs),
    /// Check every referenced file's size, CRC-32 and SST footer, and every manifest and job
    /// record; exit 1 naming each bad file.
    #[command(after_help = ops::EXIT_CODES_HELP)]
    Verify(ops::VerifyArgs),
    /// Collect garbage: unreferenced shared files and uncommitted checkpoint directories.
    /// Dry run unless --apply; never deletes what a committed manifest references.
    #[command(after_help = ops::EXIT_CODES_HELP)]
    Gc(ops::GcArgs),
    /// Benchmarks that print ratios measured in the same run.
    Bench {
        /// Print one JSON object per line (same fields) instead of key=value lines.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        which: BenchCommand,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Point operations through ValueState vs raw rust-rocksdb with identical options.
    Ops(bench_ops::OpsArgs),
    /// Incremental vs full checkpoints, against bare RocksDB checkpoint, parallel copy, cp -r.
    Checkpoint(bench_checkpoint::CheckpointArgs),
    /// TTL: bounded state under churn, compaction-filter cost, TTL access cost.
    Ttl(bench_ttl::TtlArgs),
    /// Rescale 1->2 and 2->1 vs plain restore, first checkpoint after a rescale, savepoints.
    Rescale(bench_rescale::RescaleArgs),
    /// S3 storage: upload/download throughput vs raw object_store on the same server.
    S3(bench_s3::S3Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Bench { json: true, .. } = &cli.command {
        report::set_json(true);
    }
    let result = match cli.command {
        Command::Demo(args) => return ops::finish(demo::run(&args)),
        Command::Inspect(args) => return ops::finish(ops::inspect(&args)),
        Command::Verify(args) => return ops::finish(ops::verify(&args)),
        Command::Gc(args) => return ops::finish(ops::gc(&args)),
        Command::Bench {
            which: BenchCommand::Ops(args),
            ..
        } => bench_ops::run(&args),
        Command::Bench {
            which: BenchCommand::Checkpoint(args),
            ..
        } => bench_checkpoint::run(&args),
        Command::Bench {
            which: BenchCommand::Ttl(args),
            ..
        } => bench_ttl::run(&args),
        Command::Bench {
            which: BenchCommand::Rescale(args),
            ..
        } => bench_rescale::run(&args),
        Command::Bench {
            which: BenchCommand::S3(args),
            ..
        } => bench_s3::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
