//! Checkpoint barrier alignment for a task with several input channels.
//!
//! A task feeds every element it receives into [`BarrierAligner::push`] and acts on the
//! [`Output`]s in order: process a record, take a snapshot, or (unaligned mode) persist the
//! in-flight records of a checkpoint.
//!
//! * **Aligned** (exactly-once, Flink's default): when barrier N arrives on a channel, that
//!   channel is held back (its later elements are buffered) until barrier N has arrived on
//!   every open channel. Then [`Output::Snapshot`] is emitted — the task's state reflects
//!   exactly the records before barrier N on every channel — and the held elements are
//!   released in their arrival order.
//! * **Unaligned**: the first barrier N overtakes everything; the snapshot is emitted at once
//!   and no channel is held. Records that arrive afterwards on channels whose barrier N has
//!   not arrived yet are processed *and* recorded as in-flight data of N; when the last
//!   barrier N arrives, [`Output::InFlight`] hands them over. Snapshot state plus in-flight
//!   records equals the records before barrier N on every channel: restore replays them.
//!
//! A barrier newer than the one being aligned aborts the older alignment
//! ([`Output::Aborted`]); a barrier not newer than the last started checkpoint is dropped.
//! A closed channel counts as having delivered every barrier.
//!
//! A **cancel marker** ([`Input::Cancel`], Flink's `CancelCheckpointMarker`) takes the place
//! of a barrier on a channel whose upstream task declined or aborted that checkpoint: the
//! checkpoint is aborted at once ([`Output::Aborted`]), held channels are released, and its
//! barriers arriving later are dropped. Without it the other channels would stay held until
//! the next checkpoint's barrier. On `Aborted` the task forwards a cancel marker downstream.
//!
//! Plain data, no threads: the caller owns the aligner.

use std::collections::VecDeque;

use crate::error::{Error, Result};

/// How barriers are aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlignmentMode {
    /// Hold channels back until every channel delivered the barrier.
    Aligned,
    /// Snapshot at the first barrier; in-flight records become part of the checkpoint.
    Unaligned,
}

/// An element arriving on an input channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input<T> {
    /// A data record.
    Record(T),
    /// The barrier of a checkpoint.
    Barrier(u64),
    /// The cancel marker of a checkpoint: the channel's upstream declined or aborted it, so
    /// its barrier will not come on this channel.
    Cancel(u64),
}

/// What the task must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output<T> {
    /// Process `record`, which arrived on `channel`.
    Record {
        /// Input channel index.
        channel: usize,
        /// The record.
        record: T,
    },
    /// Snapshot the task's state for `checkpoint_id` now (and forward the barrier).
    Snapshot {
        /// The checkpoint id.
        checkpoint_id: u64,
    },
    /// Unaligned mode: the in-flight records of `checkpoint_id` (arrival order, with their
    /// channels), to be stored with its snapshot. Emitted once barrier N arrived everywhere.
    InFlight {
        /// The checkpoint id.
        checkpoint_id: u64,
        /// `(channel, record)` in arrival order.
        records: Vec<(usize, T)>,
    },
    /// Checkpoint `checkpoint_id` was given up: a newer barrier or its cancel marker
    /// arrived. Discard its snapshot if one was taken (unaligned mode) and forward a cancel
    /// marker downstream.
    Aborted {
        /// The checkpoint id.
        checkpoint_id: u64,
    },
}

/// An element of a channel as the aligner keeps it: an input, or the channel's end.
#[derive(Debug)]
enum Item<T> {
    In(Input<T>),
    End,
}

/// Barrier alignment state of one task (see the module docs).
#[derive(Debug)]
pub struct BarrierAligner<T> {
    mode: AlignmentMode,
    /// Channels that delivered the current barrier (or are closed).
    arrived: Vec<bool>,
    closed: Vec<bool>,
    /// The checkpoint being aligned.
    current: Option<u64>,
    /// Highest checkpoint id started here.
    last_started: Option<u64>,
    /// `close` was called (the end may still wait behind held elements).
    ending: Vec<bool>,
    /// Aligned mode: elements of held channels, in arrival order.
    held: VecDeque<(usize, Item<T>)>,
    /// Unaligned mode: in-flight records of the current checkpoint.
    in_flight: Vec<(usize, T)>,
}

impl<T: Clone> BarrierAligner<T> {
    /// An aligner for `channels` input channels (at least 1).
    pub fn new(channels: usize, mode: AlignmentMode) -> Result<Self> {
        if channels == 0 {
            return Err(Error::InvalidOption {
                name: "channels",
                detail: "a task needs at least one input channel".into(),
            });
        }
        Ok(BarrierAligner {
            mode,
            arrived: vec![false; channels],
            closed: vec![false; channels],
            ending: vec![false; channels],
            current: None,
            last_started: None,
            held: VecDeque::new(),
            in_flight: Vec::new(),
        })
    }

    /// The checkpoint currently being aligned.
    pub fn aligning(&self) -> Option<u64> {
        self.current
    }

    /// Elements held back (aligned mode).
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Feeds one element from `channel`; returns what to do, in order.
    pub fn push(&mut self, channel: usize, input: Input<T>) -> Result<Vec<Output<T>>> {
        self.check(channel)?;
        let mut out = Vec::new();
        self.step(channel, Item::In(input), false, &mut out);
        self.release(&mut out);
        Ok(out)
    }

    /// Channel `channel` ended: it counts as having delivered every barrier from now on.
    pub fn close(&mut self, channel: usize) -> Result<Vec<Output<T>>> {
        self.check(channel)?;
        let mut out = Vec::new();
        self.ending[channel] = true;
        self.step(channel, Item::End, false, &mut out);
        self.release(&mut out);
        Ok(out)
    }

    fn check(&self, channel: usize) -> Result<()> {
        if channel >= self.arrived.len() || self.ending[channel] {
            return Err(Error::InvalidOption {
                name: "channel",
                detail: format!(
                    "channel {channel} does not exist or is closed ({} channels)",
                    self.arrived.len()
                ),
            });
        }
        Ok(())
    }

    /// Replays held elements of channels no longer blocked, until nothing moves.
    fn release(&mut self, out: &mut Vec<Output<T>>) {
        if self.mode != AlignmentMode::Aligned {
            return;
        }
        loop {
            let Some(pos) = self.held.iter().position(|(c, _)| !self.is_blocked(*c)) else {
                return;
            };
            if let Some((c, item)) = self.held.remove(pos) {
                // `pos` is the channel's oldest held element, so order is kept.
                self.step(c, item, true, out);
            }
        }
    }

    fn is_blocked(&self, channel: usize) -> bool {
        self.mode == AlignmentMode::Aligned && self.current.is_some() && self.arrived[channel]
    }

    fn step(&mut self, channel: usize, item: Item<T>, replay: bool, out: &mut Vec<Output<T>>) {
        // Per-channel order: a new element behind held elements of its channel waits too.
        if self.is_blocked(channel) || (!replay && self.held.iter().any(|(c, _)| *c == channel)) {
            self.held.push_back((channel, item));
            return;
        }
        match item {
            Item::End => {
                self.closed[channel] = true;
                self.arrived[channel] = true;
                self.maybe_finish(out);
            }
            Item::In(Input::Record(record)) => {
                if self.mode == AlignmentMode::Unaligned
                    && self.current.is_some()
                    && !self.arrived[channel]
                {
                    self.in_flight.push((channel, record.clone()));
                }
                out.push(Output::Record { channel, record });
            }
            Item::In(Input::Barrier(id)) => self.barrier(channel, id, out),
            Item::In(Input::Cancel(id)) => self.cancel(id, out),
        }
    }

    /// A cancel marker of checkpoint `id`: aborts the alignment of `id` or of an older one,
    /// and marks `id` started, so its barriers arriving later are stale.
    fn cancel(&mut self, id: u64, out: &mut Vec<Output<T>>) {
        match self.current {
            Some(cur) if id < cur => return, // stale
            Some(cur) => {
                out.push(Output::Aborted { checkpoint_id: cur });
                self.in_flight.clear();
                self.current = None;
                self.reset_arrivals();
                if id > cur {
                    out.push(Output::Aborted { checkpoint_id: id });
                }
            }
            None if self.last_started.is_some_and(|l| id <= l) => return, // stale
            None => out.push(Output::Aborted { checkpoint_id: id }),
        }
        self.last_started = Some(id);
    }

    fn barrier(&mut self, channel: usize, id: u64, out: &mut Vec<Output<T>>) {
        match self.current {
            Some(cur) if id == cur => {}
            Some(cur) if id > cur => {
                out.push(Output::Aborted { checkpoint_id: cur });
                self.in_flight.clear();
                self.reset_arrivals();
                self.start(id, out);
            }
            Some(_) => return, // older than the one being aligned: stale
            None if self.last_started.is_some_and(|l| id <= l) => return, // stale
            None => self.start(id, out),
        }
        self.arrived[channel] = true;
        self.maybe_finish(out);
    }

    fn start(&mut self, id: u64, out: &mut Vec<Output<T>>) {
        self.current = Some(id);
        self.last_started = Some(id);
        if self.mode == AlignmentMode::Unaligned {
            out.push(Output::Snapshot { checkpoint_id: id });
        }
    }

    fn reset_arrivals(&mut self) {
        for (a, c) in self.arrived.iter_mut().zip(&self.closed) {
            *a = *c;
        }
    }

    fn maybe_finish(&mut self, out: &mut Vec<Output<T>>) {
        let Some(id) = self.current else { return };
        if !self.arrived.iter().all(|a| *a) {
            return;
        }
        match self.mode {
            AlignmentMode::Aligned => out.push(Output::Snapshot { checkpoint_id: id }),
            AlignmentMode::Unaligned => out.push(Output::InFlight {
                checkpoint_id: id,
                records: std::mem::take(&mut self.in_flight),
            }),
        }
        self.current = None;
        self.reset_arrivals();
    }
}
