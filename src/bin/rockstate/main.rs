//! The `rockstate` command line, the operator's tool: the demo job, and inspect, verify and
//! garbage-collect a checkpoint storage. Benchmarks are the `rockstate-bench` binary.

mod demo;
mod ops;
mod progress;
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
}

fn main() -> ExitCode {
    // Output piped into a reader that stops early (`| head`) ends the command quietly, as it
    // does other command-line tools, instead of a panic in `println!` (Rust ignores SIGPIPE).
    // SAFETY: restores the default disposition of SIGPIPE before any other thread exists; no
    // handler runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    match cli.command {
        // The demo runs its tasks ahead of RocksDB's compactions, as an engine would.
        Command::Demo(args) => ops::finish(
            rockstate::lower_compaction_priority()
                .map_err(Into::into)
                .and_then(|()| demo::run(&args)),
        ),
        Command::Inspect(args) => ops::finish(ops::inspect(&args)),
        Command::Verify(args) => ops::finish(ops::verify(&args)),
        Command::Gc(args) => ops::finish(ops::gc(&args)),
    }
}
