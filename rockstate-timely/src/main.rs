//! `rockstate-timely`: the frequency-capping job on timely dataflow with rockstate state,
//! across OS processes, with kill -9, restart and rescale (`freqcap`); one process of such a
//! job (`worker`, started by `freqcap`); the throughput benchmark (`bench`).

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use rockstate_timely::freqcap::{run_process, ProcessArgs};
use rockstate_timely::launcher::{bench, freqcap, BenchArgs, FreqcapArgs};

/// rockstate as the state backend of a multi-process timely dataflow job.
#[derive(Parser, Debug)]
#[command(name = "rockstate-timely", version)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run the frequency-capping job as several processes, kill one with SIGKILL, restart
    /// from the newest checkpoint (optionally at another worker count) and check that the
    /// output equals a crash-free reference exactly once (`verdict: PASS`, else exit 1).
    Freqcap(FreqcapArgs),
    /// Throughput with checkpoints against checkpoints off, and the time from an epoch's
    /// end to its job-wide completion (a benchmark line).
    Bench(BenchArgs),
    /// One process of a job (started by `freqcap`).
    Worker(ProcessArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Freqcap(args) => freqcap(&args),
        Cmd::Bench(args) => bench(&args).map(|()| true),
        // A panic on any thread ends the process, so that the job restarts; each worker
        // process runs its task threads ahead of RocksDB's compactions.
        Cmd::Worker(args) => rockstate::lower_compaction_priority()
            .map(|()| rockstate_timely::operator::exit_on_panic())
            .map_err(Into::into)
            .and_then(|()| run_process(args))
            .map(|()| true),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
