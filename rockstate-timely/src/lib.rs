//! # rockstate-timely
//!
//! rockstate as the keyed state backend of a [timely dataflow](https://docs.rs/timely) job that
//! runs as several OS processes, exactly-once across `kill -9` and rescaling.
//!
//! Timely routes records between workers and tracks progress with frontiers, but keeps no
//! state and takes no checkpoints. This crate adds both, keeping the adapter small and the
//! state logic in rockstate:
//!
//! - [`operator`] owns the adapter: a keyed operator that routes every record to the worker
//!   whose key-group range holds the record's key group, applies each epoch (a timely
//!   timestamp) once its input frontier passes it, takes checkpoint `epoch` of the worker's
//!   [`rockstate::KeyedBackend`] and uploads it off the worker thread while holding a
//!   capability; the acknowledgements travel as a timely stream to worker 0, which commits
//!   the job record through [`rockstate::JobOwner`] once every worker's has arrived, and the
//!   completion is broadcast back so every worker notifies its backend and commits its staged
//!   sink output (two-phase commit).
//! - [`freqcap`] owns the frequency-capping job built on it: a deterministic partitioned
//!   source whose offsets live in operator state, per-(user, ad) counters with a TTL and
//!   impression-time lists without, alerts through a two-phase-commit sink into files, and the restart
//!   plan (key-group ranges recomputed, offsets and pending sink transactions redistributed)
//!   for any worker count.
//! - [`launcher`] owns the multi-process run: it starts the job's OS processes on 127.0.0.1,
//!   kills one with SIGKILL at a random moment, stops the rest, restarts the whole job from
//!   the newest job record (optionally at another worker count) and checks the output
//!   against a crash-free reference, and the checkpoint storage against its bound after
//!   every kill.
//! - [`error`] owns the crate's error type.

#![warn(missing_docs)]

pub mod error;
pub mod freqcap;
pub mod launcher;
pub mod operator;

pub use error::{Error, Result};
