//! The crate's error type: what can fail while planning, running or checking a job.

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The state backend, its checkpoint storage or the job owner failed.
    #[error("state backend: {0}")]
    State(#[from] rockstate::Error),
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Timely could not start its workers or a worker failed.
    #[error("timely: {0}")]
    Timely(String),
    /// Invalid arguments.
    #[error("usage: {0}")]
    Usage(String),
    /// The job's stored state contradicts itself (a job record, a sink transaction).
    #[error("job: {0}")]
    Job(String),
}

impl Error {
    /// An [`Error::Io`] with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
