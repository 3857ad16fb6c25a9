//! The `rockstate` command line: workloads that measure the backend against raw RocksDB.

mod bench_checkpoint;
mod bench_ops;
mod bench_s3;
mod bench_ttl;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// rockstate: keyed stream-processing state on RocksDB.
#[derive(Parser)]
#[command(name = "rockstate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Benchmarks that print ratios measured in the same run.
    Bench {
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
    /// S3 storage: upload/download throughput vs raw object_store on the same server.
    S3(bench_s3::S3Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench {
            which: BenchCommand::Ops(args),
        } => bench_ops::run(&args),
        Command::Bench {
            which: BenchCommand::Checkpoint(args),
        } => bench_checkpoint::run(&args),
        Command::Bench {
            which: BenchCommand::Ttl(args),
        } => bench_ttl::run(&args),
        Command::Bench {
            which: BenchCommand::S3(args),
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
