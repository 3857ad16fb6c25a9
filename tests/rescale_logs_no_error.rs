//! A rescale opens its other sources read-only and drops them: nothing of theirs is to be
//! written out, so it logs no error. (A dropped database writes its memtables out first; on a
//! read-only one that flush is refused, and the drop reported writes lost that never
//! existed.) Alone in its own test binary: `tracing` caches per call site whether any
//! subscriber listens.

mod rescale_common;

use std::sync::{Arc, Mutex};

use rand::SeedableRng;
use rescale_common::*;
use rockstate::{CheckpointOptions, RestoreFrom};

/// A subscriber that records the error events.
struct Errors(Arc<Mutex<Vec<String>>>);

struct Message<'a>(&'a mut String);

impl tracing::field::Visit for Message<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={value:?} ", field.name()));
    }
}

impl tracing::Subscriber for Errors {
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        *m.level() == tracing::Level::ERROR
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        let mut line = String::new();
        e.record(&mut Message(&mut line));
        self.0.lock().unwrap().push(line);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn a_rescale_from_two_sources_to_one_logs_no_error() {
    let store = Store::local();
    let opts = CheckpointOptions::default();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let mut model = Model::default();
    let two = open_fresh(store.path(), &store.storage, "p2", 2, &opts);
    for b in &two {
        random_ops(b, &mut model, &mut rng, 500);
    }
    checkpoint_job(&store.storage, &two.iter().collect::<Vec<_>>(), 1);
    drop(two);
    let errors = Arc::new(Mutex::new(Vec::new()));
    let one = tracing::subscriber::with_default(Errors(errors.clone()), || {
        restore_all(
            store.path(),
            &store.storage,
            "p1",
            1,
            &opts,
            RestoreFrom::Latest,
        )
    });
    check_all(&one, &model);
    let errors = errors.lock().unwrap().clone();
    assert!(errors.is_empty(), "{errors:#?}");
}
