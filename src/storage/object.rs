//! [`ObjectStorage`]: [`CheckpointStorage`] over the `object_store` crate (S3 and S3-compatible
//! servers, in-memory, or any `ObjectStore` a caller builds), behind a synchronous facade.
//!
//! This module owns the bridge from our synchronous trait to the async client: every
//! operation runs on the storage's own multi-threaded tokio runtime and the calling thread
//! waits on a plain channel. Nothing ever calls `block_on` on the caller's thread, so the
//! facade works from plain threads and from inside another tokio runtime alike.
//!
//! How the contract of [`CheckpointStorage`] is met:
//! * **Create-if-absent.** Single-request puts use `PutMode::Create` (S3 `If-None-Match: *`,
//!   supported by AWS S3 since 2024 and by moto; `InMemory` supports it natively). Files of
//!   at least [`ObjectStorageOptions::multipart_threshold`] bytes go through a multipart
//!   upload. `object_store` 0.14's `MultipartUpload::complete` completes unconditionally
//!   (`PutMultipartOptions` has no mode), but it sends the client's default headers. So on S3
//!   multipart uploads go through a second client of the same configuration whose default
//!   headers carry `If-None-Match: *`: the `CompleteMultipartUpload` is conditional (AWS S3
//!   and moto honour it; a refusal is resolved like a taken name below). The header also goes
//!   on `CreateMultipartUpload`, `UploadPart` and the abort, where S3 documents no conditional
//!   semantics; moto ignores it there (tested), real S3 is assumed to as well. Other stores
//!   (`memory://`, stores passed to [`ObjectStorage::new`]) upload to a fresh staging object
//!   `.uploads/<random>` and copy it to the name with `copy_if_not_exists`, then delete it;
//!   staging objects are hidden from [`CheckpointStorage::list`], and those of crashed
//!   processes are deleted by [`CheckpointStorage::sweep_incomplete`]. See
//!   docs/checkpoint-format.md §9.
//! * **Ambiguous failures.** A put can store the object and still report failure (a timeout
//!   or a 5xx after the write). The retry then finds the name taken; if the stored object
//!   has exactly our size and CRC-32 the put counts as done, otherwise it is
//!   [`Error::ObjectExists`]. An object is therefore never replaced with other bytes.
//! * **Retries.** Each HTTP request is retried by `object_store` (`RetryConfig`: 5xx, 429,
//!   timeouts, connection errors, exponential backoff); on top, a whole operation that still
//!   fails transiently is retried [`ObjectStorageOptions::retries`] times with exponential
//!   backoff from [`ObjectStorageOptions::initial_backoff`] (at most 10 s a sleep). A
//!   multipart upload that fails is aborted (best effort) before the retry starts a fresh one.
//! * **Digests.** Puts compute size and CRC-32 of the bytes read from the local file while
//!   sending them; gets compute them over the bytes received, as [`super::LocalStorage`]
//!   does.
//! * **Listings.** `object_store` fails a whole listing on one key its `Path` refuses (an
//!   empty, `.` or `..` segment: another system's `root/shared/a//b`). On S3 such a listing is
//!   made again through [`super::s3_requests`] with the keys as stored, and the keys that are
//!   no valid object name (so none of ours) are left out.
//! * **Leftovers.** [`CheckpointStorage::sweep_incomplete`] deletes staging objects (uploads
//!   that completed but were never copied to their name) and, on S3, aborts unfinished
//!   multipart uploads of crashed processes (`ListMultipartUploads` and
//!   `AbortMultipartUpload`, sent by [`super::s3_requests`] since `object_store` has neither):
//!   those under the root, initiated at least the minimum age before the caller's time, whose
//!   names the checkpoint layout makes. A bucket policy that refuses the two requests (403)
//!   leaves them to a lifecycle rule `AbortIncompleteMultipartUpload`; the sweep goes on.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::future::Future;
use std::io::{ErrorKind, Read, Seek, Write};
use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use futures::{FutureExt, StreamExt, TryStreamExt};
use object_store::aws::{
    AmazonS3, AmazonS3Builder, AmazonS3ConfigKey, S3ConditionalPut, S3CopyIfNotExists,
};
use object_store::memory::InMemory;
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, MultipartUpload, ObjectStore, ObjectStoreExt, PutMode, PutPayload, RetryConfig,
};
use object_store::{ClientOptions, HeaderMap, HeaderValue};
use tokio::runtime::Runtime;

use super::s3_requests::{Listed, RequestError, S3Requests};
use super::{validate_object_name, CheckpointStorage, ObjectDigest, ObjectInfo};
use crate::clock::{is_older_than, millis_since_epoch};
use crate::error::{Error, Result};

/// Settings of an [`ObjectStorage`].
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectStorageOptions {
    /// Files of at least this many bytes are uploaded in parts. Default 64 MiB (RocksDB's
    /// SSTs are mostly smaller and go in one request, which is faster on every server tried;
    /// AWS recommends parts above 100 MB).
    pub multipart_threshold: u64,
    /// Part size of multipart uploads. Default 16 MiB; S3 requires at least 5 MiB (except for
    /// the last part) and at most 5 GiB, the most accepted here.
    pub part_size: usize,
    /// Parts of one file in flight at once. Default 4.
    pub part_concurrency: usize,
    /// Retries of a whole operation that failed transiently after the per-request retries.
    /// Default 3.
    pub retries: u32,
    /// First backoff between whole-operation retries (doubles each time, up to 10 s) and
    /// between request retries inside `object_store`. Default 100 ms.
    pub initial_backoff: Duration,
    /// Per-request retries inside `object_store` (5xx, 429, timeouts). Default 5.
    pub request_retries: usize,
    /// Worker threads of the storage's own tokio runtime. Default 2.
    pub runtime_threads: usize,
    /// Extra `object_store` S3 settings as `(key, value)`, applied after the environment
    /// (`AWS_*` variables) and the URL: for example `("aws_endpoint", "http://127.0.0.1:9000")`,
    /// `("aws_access_key_id", ..)`, `("aws_secret_access_key", ..)`, `("aws_region", ..)`,
    /// `("aws_allow_http", "true")`. Keys are `object_store`'s `AmazonS3ConfigKey` names. The
    /// bucket is always the URL's (an `aws_bucket_name` here or in the environment is not
    /// used).
    /// `("timeout", "120s")` sets the per-request timeout (30 s unless set): it covers a whole
    /// request, body included, so a single-request put of up to `multipart_threshold` bytes
    /// (or a part of `part_size`) must go through in it; each retry starts the request over.
    /// On an uplink below ~2.2 MB/s raise it, or lower `multipart_threshold` and `part_size`.
    pub s3: Vec<(String, String)>,
}

impl Default for ObjectStorageOptions {
    fn default() -> Self {
        ObjectStorageOptions {
            multipart_threshold: 64 << 20,
            part_size: 16 << 20,
            part_concurrency: 4,
            retries: 3,
            initial_backoff: Duration::from_millis(100),
            request_retries: 5,
            runtime_threads: 2,
            s3: Vec::new(),
        }
    }
}

impl ObjectStorageOptions {
    /// Checks every field's range.
    pub fn validate(&self) -> Result<()> {
        let bad = |name, detail: String| Err(Error::InvalidOption { name, detail });
        if self.part_size == 0 || self.part_size > MAX_PART_BYTES {
            return bad(
                "part_size",
                format!("{} is not in 1..=5 GiB", self.part_size),
            );
        }
        if self.part_concurrency == 0 || self.part_concurrency > 64 {
            return bad(
                "part_concurrency",
                format!("{} is not in 1..=64", self.part_concurrency),
            );
        }
        if self.runtime_threads == 0 || self.runtime_threads > 64 {
            return bad(
                "runtime_threads",
                format!("{} is not in 1..=64", self.runtime_threads),
            );
        }
        if self.retries > 20 {
            return bad("retries", format!("{} is more than 20", self.retries));
        }
        Ok(())
    }
}

/// The longest sleep between two whole-operation retries (as `object_store`'s between
/// requests): 20 retries from 100 ms doubled without a bound would sleep 14.5 hours once.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// The sleep before retry `attempt + 1`: `initial` doubled `attempt` times, at most
/// [`MAX_BACKOFF`].
fn backoff(initial: Duration, attempt: u32) -> Duration {
    initial
        .saturating_mul(1u32 << attempt.min(31))
        .min(MAX_BACKOFF)
}

/// Name prefix (under the root) of multipart staging objects; see the module docs.
const STAGING_PREFIX: &str = ".uploads/";

/// Chunks of one download buffered between the runtime and the writing thread.
const GET_CHUNKS_IN_FLIGHT: usize = 64;

/// Write buffer of downloads.
const WRITE_BUFFER: usize = 1 << 20;

/// [`CheckpointStorage`] on an `object_store` store under a name prefix. See the module docs
/// for how create-if-absent, retries and digests work.
pub struct ObjectStorage {
    store: Arc<dyn ObjectStore>,
    /// For S3: the same client sending `If-None-Match: *` on every request, used for
    /// multipart uploads straight to their name (conditional completion). `None`: multipart
    /// uploads go through a staging object and `copy_if_not_exists`.
    conditional_multipart: Option<Arc<dyn ObjectStore>>,
    /// For S3: the requests `object_store` lacks (the sweep's unfinished uploads, listings
    /// with keys `object_store` cannot parse).
    s3: Option<S3Requests>,
    /// Name prefix of every object, without a trailing `/`; may be empty.
    root: String,
    /// What this storage was opened from (for messages).
    url: String,
    options: ObjectStorageOptions,
    /// `Some` until drop; shut down in the background so dropping inside an async context
    /// does not panic.
    runtime: Option<Runtime>,
    /// Whether a listing showed the bucket exists: S3 answers a HEAD of an object in a
    /// missing bucket with a 404 and no body, like a missing object, so `exists` asks once.
    bucket_seen: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for ObjectStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStorage")
            .field("url", &self.url)
            .field("root", &self.root)
            .finish()
    }
}

impl Drop for ObjectStorage {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// The `object_store` S3 settings of a storage opened from `url`: the `AWS_*` environment
/// variables `object_store` knows, then `options.s3`, in the order they apply.
fn s3_config(
    url: &str,
    options: &ObjectStorageOptions,
) -> Result<Vec<(AmazonS3ConfigKey, String)>> {
    // As `AmazonS3Builder::from_env`: unknown `AWS_*` variables are not ours to refuse.
    let mut config: Vec<(AmazonS3ConfigKey, String)> = std::env::vars()
        .filter(|(key, _)| key.starts_with("AWS_"))
        .filter_map(|(key, value)| Some((key.to_ascii_lowercase().parse().ok()?, value)))
        .collect();
    for (key, value) in &options.s3 {
        let key: AmazonS3ConfigKey = key
            .parse()
            .map_err(|e| url_error(url, format!("option `{key}`: {e}")))?;
        config.push((key, value.clone()));
    }
    Ok(config)
}

/// An S3 client for `bucket` with the settings `config` ([`s3_config`]) but for the bucket,
/// which is always `bucket` (the URL's); `default_headers` go on every request.
fn s3_store(
    url: &str,
    bucket: &str,
    config: &[(AmazonS3ConfigKey, String)],
    options: &ObjectStorageOptions,
    default_headers: Option<HeaderMap>,
) -> Result<AmazonS3> {
    let mut builder = AmazonS3Builder::new();
    if let Some(headers) = default_headers {
        builder = builder.with_client_options(ClientOptions::new().with_default_headers(headers));
    }
    for (key, value) in config {
        builder = builder.with_config(*key, value);
    }
    // The URL's bucket, whatever `AWS_BUCKET_NAME` or an `aws_bucket_name` option says.
    builder = builder.with_bucket_name(bucket);
    let endpoint = builder.get_config_value(&AmazonS3ConfigKey::Endpoint);
    if let Some(e) = &endpoint {
        // A URL without its scheme made every signed request panic inside the client.
        let host = e
            .strip_prefix("http://")
            .or_else(|| e.strip_prefix("https://"));
        if host.is_none_or(|h| h.is_empty() || h.starts_with('/')) {
            return Err(url_error(
                url,
                format!("endpoint {e:?} is not an http:// or https:// URL with a host"),
            ));
        }
    }
    let plain_http = endpoint.is_some_and(|e| e.starts_with("http://"));
    if plain_http {
        builder = builder.with_allow_http(true);
    }
    if builder
        .get_config_value(&AmazonS3ConfigKey::Region)
        .is_none()
    {
        builder = builder.with_region("us-east-1");
    }
    builder
        .with_conditional_put(S3ConditionalPut::ETagMatch)
        .with_copy_if_not_exists(S3CopyIfNotExists::Multipart)
        .with_retry(RetryConfig {
            backoff: BackoffConfig {
                init_backoff: options.initial_backoff,
                max_backoff: Duration::from_secs(10),
                base: 2.0,
            },
            max_retries: options.request_retries,
            retry_timeout: Duration::from_secs(120),
        })
        .build()
        .map_err(|e| url_error(url, e))
}

/// The largest multipart part S3 accepts.
const MAX_PART_BYTES: usize = 5 << 30;

fn url_error(url: &str, detail: impl std::fmt::Display) -> Error {
    Error::InvalidStorageUrl {
        url: url.to_string(),
        detail: detail.to_string(),
    }
}

/// Whether `name` can be a bucket: S3's rules (3 to 63 lowercase letters, digits, '.' and
/// '-', starting and ending with a letter or digit), widened to what older buckets and other
/// servers allow (upper case, '_', up to 255). Anything else would change the request it goes
/// into: a '#' or '?' cut the name, so another bucket was listed (and a delete became one of
/// the bucket), a space made the client panic.
fn valid_bucket_name(name: &str) -> bool {
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    (3..=255).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        && ends_ok(name.chars().next())
        && ends_ok(name.chars().last())
}

/// Splits `scheme://authority/rest` into (authority, rest without slashes at either end).
fn split_url<'a>(url: &'a str, scheme: &str) -> Option<(&'a str, &'a str)> {
    let rest = url.strip_prefix(scheme)?.strip_prefix("://")?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    Some((authority, path.trim_matches('/')))
}

impl ObjectStorage {
    /// Opens `s3://bucket[/prefix]` (S3 or an S3-compatible server: see [`super::open_storage`]
    /// for where settings come from) or `memory://[prefix]` (a fresh in-memory store).
    pub fn open(url: &str, options: &ObjectStorageOptions) -> Result<Self> {
        options.validate()?;
        if let Some((_, prefix)) = split_url(url, "memory") {
            return Self::new(Arc::new(InMemory::new()), prefix, url, options.clone());
        }
        let Some((bucket, prefix)) = split_url(url, "s3") else {
            return Err(url_error(
                url,
                "unknown scheme (use s3://, memory://, file://)",
            ));
        };
        if bucket.is_empty() {
            return Err(url_error(url, "no bucket"));
        }
        if !valid_bucket_name(bucket) {
            return Err(url_error(
                url,
                format!(
                    "invalid bucket name {bucket:?} (3 to 255 letters, digits, '.', '-' or '_', \
                     starting and ending with a letter or digit)"
                ),
            ));
        }
        let config = s3_config(url, options)?;
        let store = s3_store(url, bucket, &config, options, None)?;
        // The same client configuration, sending `If-None-Match: *` on every request: used
        // only for multipart uploads, to make their completion conditional.
        let mut if_absent = HeaderMap::new();
        if_absent.insert("if-none-match", HeaderValue::from_static("*"));
        let multipart_store = s3_store(url, bucket, &config, options, Some(if_absent))?;
        let requests = S3Requests::new(bucket, &config, &store).map_err(|e| url_error(url, e))?;
        let mut storage = Self::new(Arc::new(store), prefix, url, options.clone())?;
        storage.conditional_multipart = Some(Arc::new(multipart_store));
        storage.s3 = requests;
        Ok(storage)
    }

    /// Storage on an `object_store` store the caller built (any backend: GCS, Azure, a
    /// throttled or instrumented wrapper, ...), under `prefix` (may be empty). `describe`
    /// names it in messages.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        describe: &str,
        options: ObjectStorageOptions,
    ) -> Result<Self> {
        options.validate()?;
        let root = prefix.trim_matches('/').to_string();
        if !root.is_empty() {
            validate_object_name(&root).map_err(|_| url_error(describe, "bad prefix"))?;
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(options.runtime_threads)
            .thread_name("rockstate-storage")
            .enable_all()
            .build()
            .map_err(|e| Error::io("<tokio runtime>", e))?;
        Ok(ObjectStorage {
            store,
            conditional_multipart: None,
            s3: None,
            root,
            url: describe.to_string(),
            options,
            runtime: Some(runtime),
            bucket_seen: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// After a HEAD of `name` (at `path`) found nothing: `Ok(false)` if the bucket exists, a
    /// permanent error if it does not. The first time, a listing under the object's own path
    /// (empty, so one small response) tells, and a bucket once seen is taken to stay.
    fn bucket_exists(&self, name: &str, path: &ObjectPath) -> Result<bool> {
        use std::sync::atomic::Ordering;
        if self.bucket_seen.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let (store, path) = (self.store(), path.clone());
        match self.block_on(async move { store.list_with_delimiter(Some(&path)).await })? {
            Ok(_) => {
                self.bucket_seen.store(true, Ordering::Relaxed);
                Ok(false)
            }
            Err(e) => Err(map_error("head", name, e)),
        }
    }

    /// The underlying `object_store` store (benchmarks compare against it).
    pub fn store(&self) -> Arc<dyn ObjectStore> {
        Arc::clone(&self.store)
    }

    /// The store path of object `name` (the prefix joined with the name).
    pub fn object_path(&self, name: &str) -> Result<ObjectPath> {
        validate_object_name(name)?;
        let full = if self.root.is_empty() {
            name.to_string()
        } else {
            format!("{}/{name}", self.root)
        };
        ObjectPath::parse(&full).map_err(|_| Error::InvalidObjectName(name.to_string()))
    }

    /// Runs `fut` on the storage's runtime and waits for it on the calling thread (which may
    /// be any thread, inside a tokio runtime or not). A test aid (feature `testing`): tests
    /// reach the object store directly through it.
    #[cfg(feature = "testing")]
    pub fn run<T, F>(&self, fut: F) -> Result<T>
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        self.block_on(fut)
    }

    /// Runs `fut` on the storage's runtime and waits for it on the calling thread (which may
    /// be any thread, inside a tokio runtime or not).
    pub(crate) fn block_on<T, F>(&self, fut: F) -> Result<T>
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        let rx = self.spawn(fut)?;
        answer(&rx)
    }

    /// Starts `fut` on the storage's runtime; [`answer`] waits for its output. A panic in it
    /// (a client library's `expect`) comes back as an error naming it, not as a runtime gone.
    fn spawn<T, F>(&self, fut: F) -> Result<mpsc::Receiver<std::thread::Result<T>>>
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        let rt = self.runtime.as_ref().ok_or_else(stopped)?;
        let (tx, rx) = mpsc::sync_channel(1);
        rt.spawn(async move {
            let _ = tx.send(std::panic::AssertUnwindSafe(fut).catch_unwind().await);
        });
        Ok(rx)
    }

    /// Runs `op` until it succeeds, fails permanently, or the retries are used up, sleeping
    /// with exponential backoff between attempts. `op` gets the attempt number (0 first).
    fn with_retries<T>(&self, mut op: impl FnMut(u32) -> Result<T>) -> Result<T> {
        let mut attempt = 0;
        loop {
            match op(attempt) {
                Err(e) if is_transient(&e) && attempt < self.options.retries => {
                    std::thread::sleep(backoff(self.options.initial_backoff, attempt));
                    attempt += 1;
                }
                r => return r,
            }
        }
    }

    /// The name of the object at `full` (a whole key), `None` outside the root.
    fn name_of_key(&self, full: &str) -> Option<String> {
        if self.root.is_empty() {
            Some(full.to_string())
        } else {
            full.strip_prefix(&self.root)?
                .strip_prefix('/')
                .map(str::to_string)
        }
    }

    /// A single-request create-if-absent put of `payload` whose digest is `digest`.
    fn put_once(&self, name: &str, payload: Bytes, digest: ObjectDigest) -> Result<ObjectDigest> {
        let path = self.object_path(name)?;
        let store = self.store();
        self.with_retries(|_| {
            let (store, path, payload) = (Arc::clone(&store), path.clone(), payload.clone());
            let r = self.block_on(async move {
                store
                    .put_opts(&path, PutPayload::from(payload), PutMode::Create.into())
                    .await
            })?;
            match r {
                Ok(_) => Ok(digest),
                Err(object_store::Error::AlreadyExists { .. }) => self.resolve_exists(name, digest),
                Err(e) => Err(map_error("put", name, e)),
            }
        })
    }

    /// A put found `name` taken: success if the object holds exactly our bytes (an earlier
    /// attempt of this put stored them), [`Error::ObjectExists`] if it holds others, and a
    /// transient error (the put is retried) if it holds none.
    fn resolve_exists(&self, name: &str, digest: ObjectDigest) -> Result<ObjectDigest> {
        let mut sink = std::io::sink();
        match self.stream_object(name, &mut sink, Path::new(name)) {
            Ok(d) if d == digest => Ok(digest),
            Ok(_) => Err(Error::ObjectExists {
                name: name.to_string(),
            }),
            // Refused, yet nothing is there: a conflicting operation in progress (S3's 409
            // ConditionalRequestConflict, "try again") or a concurrent delete. Retry the put.
            Err(Error::ObjectNotFound { .. }) => Err(Error::Storage {
                operation: "put",
                name: name.to_string(),
                detail: "the name was refused but holds no object (a conflicting operation \
                         in progress)"
                    .into(),
                transient: true,
            }),
            Err(e) => Err(e),
        }
    }

    /// Multipart upload of the local file `local` as `name`, create-if-absent (see the module
    /// docs): on S3 straight to the name with a conditional completion; on other stores to a
    /// staging object, then a conditional copy to `name`, the staging object deleted in every
    /// case but a crash.
    fn put_multipart(&self, name: &str, local: &Path) -> Result<ObjectDigest> {
        let path = self.object_path(name)?;
        if let Some(store) = &self.conditional_multipart {
            return self.with_retries(|_| self.multipart_attempt(store, name, &path, local));
        }
        let staging_name = format!("{STAGING_PREFIX}{:032x}", rand::random::<u128>());
        let staging = self.object_path(&staging_name)?;
        let result = self
            .with_retries(|_| self.multipart_attempt(&self.store, name, &staging, local))
            .and_then(|digest| self.copy_if_absent(name, &staging, &path, digest));
        let cleanup = self.delete(&staging_name);
        let digest = result?;
        cleanup?;
        Ok(digest)
    }

    /// Copies the staging object to `path` unless `name` exists; a taken name is resolved as
    /// for single puts ([`Self::resolve_exists`]).
    fn copy_if_absent(
        &self,
        name: &str,
        staging: &ObjectPath,
        path: &ObjectPath,
        digest: ObjectDigest,
    ) -> Result<ObjectDigest> {
        let store = self.store();
        self.with_retries(|_| {
            let (store, from, to) = (Arc::clone(&store), staging.clone(), path.clone());
            match self.block_on(async move { store.copy_if_not_exists(&from, &to).await })? {
                Ok(()) => Ok(digest),
                Err(object_store::Error::AlreadyExists { .. }) => self.resolve_exists(name, digest),
                Err(e) => Err(map_error("put", name, e)),
            }
        })
    }

    /// One multipart upload of `local` to `path` on `store`. A completion refused because the
    /// name exists (`If-None-Match: *` of [`Self::conditional_multipart`]) is resolved as for
    /// single puts ([`Self::resolve_exists`]).
    fn multipart_attempt(
        &self,
        store: &Arc<dyn ObjectStore>,
        name: &str,
        path: &ObjectPath,
        local: &Path,
    ) -> Result<ObjectDigest> {
        let store = Arc::clone(store);
        let path2 = path.clone();
        let mut upload: Box<dyn MultipartUpload> = self
            .block_on(async move { store.put_multipart(&path2).await })?
            .map_err(|e| map_error("put", name, e))?;
        let result = self.send_parts(name, &mut upload, local);
        let mut taken = None;
        let (upload_back, result) = match result {
            Ok(digest) => {
                let (upload, done) = self.block_on(async move {
                    let r = upload.complete().await;
                    (upload, r)
                })?;
                let done = match done {
                    Ok(_) => Ok(digest),
                    Err(
                        object_store::Error::Precondition { .. }
                        | object_store::Error::AlreadyExists { .. },
                    ) => {
                        taken = Some(digest);
                        Err(Error::ObjectExists {
                            name: name.to_string(),
                        })
                    }
                    Err(e) => Err(map_error("put", name, e)),
                };
                (upload, done)
            }
            Err(e) => (upload, Err(e)),
        };
        if result.is_err() {
            let mut upload = upload_back;
            let _ = self.block_on(async move { upload.abort().await });
        }
        match taken {
            Some(digest) => self.resolve_exists(name, digest),
            None => result,
        }
    }

    /// Reads `local` part by part on this thread (computing the digest) and uploads up to
    /// `part_concurrency` parts at once on the runtime.
    fn send_parts(
        &self,
        name: &str,
        upload: &mut Box<dyn MultipartUpload>,
        local: &Path,
    ) -> Result<ObjectDigest> {
        let mut file = File::open(local).map_err(|e| Error::io(local, e))?;
        let len = file.metadata().map_err(|e| Error::io(local, e))?.len();
        let mut hasher = crc32fast::Hasher::new();
        let mut size = 0u64;
        type Part = mpsc::Receiver<std::thread::Result<object_store::Result<()>>>;
        let mut in_flight: VecDeque<Part> = VecDeque::new();
        let wait = |rx: Part| answer(&rx)?.map_err(|e| map_error("put", name, e));
        loop {
            // A part's buffer holds what is left of the file, not a whole part: a file
            // smaller than `part_size` allocates its own size.
            let left = usize::try_from(len.saturating_sub(size)).unwrap_or(usize::MAX);
            let mut buf = vec![0u8; self.options.part_size.min(left)];
            let n = read_full(&mut file, &mut buf).map_err(|e| Error::io(local, e))?;
            if n == 0 && size > 0 {
                break;
            }
            buf.truncate(n);
            hasher.update(&buf);
            size += n as u64;
            let part = upload.put_part(PutPayload::from(buf));
            in_flight.push_back(self.spawn(part)?);
            if in_flight.len() >= self.options.part_concurrency {
                if let Some(rx) = in_flight.pop_front() {
                    wait(rx)?;
                }
            }
            if n < self.options.part_size {
                break;
            }
        }
        while let Some(rx) = in_flight.pop_front() {
            wait(rx)?;
        }
        Ok(ObjectDigest {
            size,
            crc32: hasher.finalize(),
        })
    }

    /// Streams object `name` into `out`, returning the digest of the bytes received.
    fn stream_object(
        &self,
        name: &str,
        out: &mut dyn Write,
        out_path: &Path,
    ) -> Result<ObjectDigest> {
        let path = self.object_path(name)?;
        let store = self.store();
        // Chunks, then `None` once the stream ended: a task that stops without it (a panic, a
        // runtime shutting down) must not pass for a finished download.
        let (tx, rx) = mpsc::channel::<object_store::Result<Option<Bytes>>>();
        let credits = Arc::new(tokio::sync::Semaphore::new(GET_CHUNKS_IN_FLIGHT));
        // Closing the semaphore when this function returns stops the task if it still waits.
        struct CloseOnDrop(Arc<tokio::sync::Semaphore>);
        impl Drop for CloseOnDrop {
            fn drop(&mut self) {
                self.0.close();
            }
        }
        let _close = CloseOnDrop(Arc::clone(&credits));
        let task_credits = Arc::clone(&credits);
        let runtime = self.runtime.as_ref().ok_or_else(stopped)?;
        runtime.spawn(async move {
            let mut stream = match store.get(&path).await {
                Ok(r) => r.into_stream(),
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            while let Some(chunk) = stream.next().await {
                match task_credits.acquire().await {
                    Ok(permit) => permit.forget(),
                    Err(_) => return,
                }
                if tx.send(chunk.map(Some)).is_err() {
                    return;
                }
            }
            let _ = tx.send(Ok(None));
        });
        let mut hasher = crc32fast::Hasher::new();
        let mut size = 0u64;
        // Network chunks are small; write in large blocks.
        let mut out = std::io::BufWriter::with_capacity(WRITE_BUFFER, out);
        let mut ended = false;
        for chunk in rx {
            let Some(chunk) = chunk.map_err(|e| map_error("get", name, e))? else {
                ended = true;
                break;
            };
            hasher.update(&chunk);
            size += chunk.len() as u64;
            out.write_all(&chunk).map_err(|e| Error::io(out_path, e))?;
            credits.add_permits(1);
        }
        if !ended {
            return Err(Error::Storage {
                operation: "get",
                name: name.to_string(),
                detail: "the download stopped before the object's end".into(),
                transient: true,
            });
        }
        out.flush().map_err(|e| Error::io(out_path, e))?;
        Ok(ObjectDigest {
            size,
            crc32: hasher.finalize(),
        })
    }

    /// On S3: aborts the bucket's unfinished multipart uploads under the root that were
    /// initiated `min_age` or longer before `now_ms` (by the server's clock) and whose names
    /// the checkpoint layout makes ([`is_own_upload`]); returns how many. Others' uploads
    /// beside ours are left, and so is an upload whose time does not parse. A server that
    /// refuses the listing or an abort for good ([`refused`]) is logged and ends this part of
    /// the sweep without failing it: the rest of a garbage collection must not depend on a
    /// permission a bucket policy may leave out.
    fn abort_unfinished_uploads(&self, now_ms: u64, min_age: Duration) -> Result<usize> {
        let Some(s3) = &self.s3 else {
            return Ok(0);
        };
        let prefix = if self.root.is_empty() {
            String::new()
        } else {
            format!("{}/", self.root)
        };
        let listed = self.with_retries(|_| {
            let (s3, p) = (s3.clone(), prefix.clone());
            match self.block_on(async move { s3.list(&p).await })? {
                Ok(listed) => Ok(Some(listed)),
                Err(e) if refused(&e) => {
                    tracing::warn!(url = %self.url, error = %e.detail,
                        "unfinished multipart uploads not listed (the bucket's lifecycle rules \
                         must abort them)");
                    Ok(None)
                }
                Err(e) => Err(request_error("list uploads", &prefix, e)),
            }
        })?;
        let mut aborted = 0;
        for upload in listed.into_iter().flatten() {
            let Some(name) = upload.key.strip_prefix(&prefix) else {
                continue;
            };
            let old = upload
                .initiated_ms
                .is_some_and(|ms| is_older_than(ms, now_ms, min_age));
            if !old || !is_own_upload(name) {
                continue;
            }
            let done = self.with_retries(|_| {
                let (s3, key, id) = (s3.clone(), upload.key.clone(), upload.upload_id.clone());
                match self.block_on(async move { s3.abort(&key, &id).await })? {
                    Ok(()) => Ok(true),
                    Err(e) if refused(&e) => {
                        tracing::warn!(url = %self.url, error = %e.detail,
                            "unfinished multipart uploads not aborted (the bucket's lifecycle \
                             rules must abort them)");
                        Ok(false)
                    }
                    Err(e) => Err(request_error("abort upload", name, e)),
                }
            })?;
            if !done {
                break;
            }
            aborted += 1;
        }
        Ok(aborted)
    }

    /// Every object whose name starts with `prefix`, staging objects included.
    fn list_all(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        // Stores list by whole path segments: list the directory part, filter by the rest.
        let dir = prefix.rfind('/').map_or("", |i| &prefix[..i]);
        let full = match (self.root.is_empty(), dir.is_empty()) {
            (true, _) => dir.to_string(),
            (false, true) => self.root.clone(),
            (false, false) => format!("{}/{dir}", self.root),
        };
        let list_path = if full.is_empty() {
            None
        } else {
            Some(
                ObjectPath::parse(&full)
                    .map_err(|_| Error::InvalidObjectName(prefix.to_string()))?,
            )
        };
        let store = self.store();
        let listed = self.with_retries(|_| {
            let (store, list_path) = (Arc::clone(&store), list_path.clone());
            match self.block_on(async move {
                store.list(list_path.as_ref()).try_collect::<Vec<_>>().await
            })? {
                Ok(metas) => Ok(Some(metas)),
                // A key `object_store`'s `Path` refuses (another system's `a//b`) fails the
                // whole listing: list it again through S3's own answer.
                Err(object_store::Error::InvalidPath { .. }) if self.s3.is_some() => Ok(None),
                Err(e) => Err(map_error("list", prefix, e)),
            }
        })?;
        let objects = match listed {
            Some(metas) => metas
                .into_iter()
                .map(|m| Listed {
                    key: m.location.to_string(),
                    size: m.size,
                    last_modified_ms: u64::try_from(m.last_modified.timestamp_millis())
                        .unwrap_or(0),
                })
                .collect(),
            None => self.list_as_stored(&full, prefix)?,
        };
        Ok(objects
            .into_iter()
            .filter_map(|o| {
                let name = self.name_of_key(&o.key)?;
                (name.starts_with(prefix) && validate_object_name(&name).is_ok()).then(|| {
                    ObjectInfo {
                        name,
                        size: o.size,
                        last_modified: UNIX_EPOCH + Duration::from_millis(o.last_modified_ms),
                    }
                })
            })
            .collect())
    }

    /// The objects under the directory `full` (`""`: the whole bucket) as S3 lists them,
    /// keys `object_store` cannot parse included (the caller leaves them out: no name of ours
    /// is one). Logged, since another system's key is what brings a listing here.
    fn list_as_stored(&self, full: &str, prefix: &str) -> Result<Vec<Listed>> {
        // Only S3 storages list here (`list_all` falls back only with `self.s3`).
        let Some(s3) = &self.s3 else {
            return Ok(Vec::new());
        };
        let key_prefix = if full.is_empty() {
            String::new()
        } else {
            format!("{full}/")
        };
        tracing::debug!(url = %self.url, prefix = %key_prefix,
            "a key object_store cannot parse: listing as stored");
        self.with_retries(|_| {
            let (s3, p) = (s3.clone(), key_prefix.clone());
            self.block_on(async move { s3.list_objects(&p).await })?
                .map_err(|e| request_error("list", prefix, e))
        })
    }
}

/// A valid object name outside the staging prefix (reserved for multipart staging).
fn check_name(name: &str) -> Result<()> {
    validate_object_name(name)?;
    if name.starts_with(STAGING_PREFIX) {
        return Err(Error::InvalidObjectName(name.to_string()));
    }
    Ok(())
}

/// Whether an unfinished upload to `name` (under the root) may be one of this storage's
/// puts: `name`, or what follows one of its `/`s (the namespace of a
/// [`super::ScopedStorage`], whose sweep reaches its inner storage), is a name the checkpoint
/// layout uploads (a shared object or a checkpoint's object). Another system's uploads under
/// the same root (Flink's `shared/<uuid>`, `chk-<n>/<uuid>`) do not parse as either.
fn is_own_upload(name: &str) -> bool {
    std::iter::once(name)
        .chain(name.match_indices('/').map(|(i, _)| &name[i + 1..]))
        .any(|n| {
            crate::layout::parse_shared_name(n).is_some()
                || crate::layout::parse_checkpoint_object(n).is_some()
        })
}

/// Whether the server refuses a request on unfinished uploads for good: no permission (403:
/// a policy without `s3:ListBucketMultipartUploads` or `s3:AbortMultipartUpload`) or no such
/// request (405, 501: some S3-compatible servers).
fn refused(e: &RequestError) -> bool {
    matches!(e.status, Some(403 | 405 | 501))
}

/// Our error for a failed request of [`S3Requests`].
fn request_error(operation: &'static str, name: &str, e: RequestError) -> Error {
    Error::Storage {
        operation,
        name: name.to_string(),
        detail: e.detail,
        transient: e.transient,
    }
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
fn read_full(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The output of a task [`ObjectStorage::spawn`] started.
fn answer<T>(rx: &mpsc::Receiver<std::thread::Result<T>>) -> Result<T> {
    rx.recv().map_err(|_| stopped())?.map_err(|panic| {
        let detail = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("no message");
        Error::Storage {
            operation: "run",
            name: String::new(),
            detail: format!("a storage request panicked: {detail}"),
            transient: false,
        }
    })
}

fn stopped() -> Error {
    Error::Storage {
        operation: "run",
        name: String::new(),
        detail: "the storage runtime stopped".into(),
        transient: false,
    }
}

fn is_transient(e: &Error) -> bool {
    matches!(
        e,
        Error::Storage {
            transient: true,
            ..
        }
    )
}

/// The HTTP status an `object_store` error reports, if any (its message carries it:
/// "... status code: 400 Bad Request ...").
fn http_status(text: &str) -> Option<u16> {
    let at = text.find("status code: ")? + "status code: ".len();
    text.get(at..at + 3)?.parse().ok()
}

/// Whether an `object_store` error says the bucket itself is missing (a 404 that is no
/// missing object: a typo in the URL, a deleted bucket).
fn no_bucket(e: &object_store::Error) -> bool {
    e.to_string().contains("NoSuchBucket")
}

/// Our error for an `object_store` error of `operation` on `name`.
fn map_error(operation: &'static str, name: &str, e: object_store::Error) -> Error {
    let permanent = |e: object_store::Error| Error::Storage {
        operation,
        name: name.to_string(),
        detail: e.to_string(),
        transient: false,
    };
    match e {
        // A missing object only where one is read; a 404 elsewhere (a put, a multipart upload
        // gone, a missing bucket) is a refusal.
        object_store::Error::NotFound { .. } if no_bucket(&e) || operation == "put" => permanent(e),
        object_store::Error::NotFound { .. } => Error::ObjectNotFound {
            name: name.to_string(),
        },
        // A put's taken name; elsewhere `object_store` reports a 409 Conflict so, which S3
        // answers a read or delete with while a conflicting operation on the object is in
        // progress ("OperationAborted": try again).
        object_store::Error::AlreadyExists { .. } if operation == "put" => Error::ObjectExists {
            name: name.to_string(),
        },
        object_store::Error::AlreadyExists { .. } => Error::Storage {
            operation,
            name: name.to_string(),
            detail: e.to_string(),
            transient: true,
        },
        // Network errors, 5xx, timeouts and throttling surface as `Generic` once the request
        // retries are used up, but so do other client errors (400, 405, ...): those are
        // permanent, as is everything else (bad path, unsupported, precondition).
        object_store::Error::Generic { .. } => {
            let transient = match http_status(&e.to_string()) {
                None => true,
                Some(s) => s >= 500 || s == 408 || s == 429,
            };
            Error::Storage {
                operation,
                name: name.to_string(),
                detail: e.to_string(),
                transient,
            }
        }
        other => permanent(other),
    }
}

impl CheckpointStorage for ObjectStorage {
    fn put_file(&self, name: &str, local: &Path) -> Result<ObjectDigest> {
        check_name(name)?;
        let size = std::fs::metadata(local)
            .map_err(|e| Error::io(local, e))?
            .len();
        if size >= self.options.multipart_threshold {
            return self.put_multipart(name, local);
        }
        let bytes = std::fs::read(local).map_err(|e| Error::io(local, e))?;
        let digest = ObjectDigest {
            size: bytes.len() as u64,
            crc32: crc32fast::hash(&bytes),
        };
        self.put_once(name, Bytes::from(bytes), digest)
    }

    fn put_bytes(&self, name: &str, bytes: &[u8]) -> Result<()> {
        check_name(name)?;
        let digest = ObjectDigest {
            size: bytes.len() as u64,
            crc32: crc32fast::hash(bytes),
        };
        self.put_once(name, Bytes::copy_from_slice(bytes), digest)
            .map(|_| ())
    }

    fn get_file(&self, name: &str, local: &Path) -> Result<ObjectDigest> {
        validate_object_name(name)?;
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(local)
            .map_err(|e| Error::io(local, e))?;
        self.with_retries(|attempt| {
            if attempt > 0 {
                file.set_len(0).map_err(|e| Error::io(local, e))?;
                file.rewind().map_err(|e| Error::io(local, e))?;
            }
            self.stream_object(name, &mut file, local)
        })
    }

    fn get_bytes(&self, name: &str) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.with_retries(|_| {
            out.clear();
            self.stream_object(name, &mut out, Path::new(name))
        })?;
        Ok(out)
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let mut objects = self.list_all(prefix)?;
        objects.retain(|o| !o.name.starts_with(STAGING_PREFIX));
        Ok(objects)
    }

    fn sweep_incomplete(&self, now_ms: u64, min_age: Duration) -> Result<usize> {
        let mut removed = 0;
        for o in self.list_all(STAGING_PREFIX)? {
            if is_older_than(millis_since_epoch(o.last_modified), now_ms, min_age) {
                self.delete(&o.name)?;
                removed += 1;
            }
        }
        Ok(removed + self.abort_unfinished_uploads(now_ms, min_age)?)
    }

    fn exists(&self, name: &str) -> Result<bool> {
        let path = self.object_path(name)?;
        let store = self.store();
        self.with_retries(|_| {
            let (store, head) = (Arc::clone(&store), path.clone());
            match self.block_on(async move { store.head(&head).await })? {
                Ok(_) => Ok(true),
                Err(object_store::Error::NotFound { .. }) => self.bucket_exists(name, &path),
                Err(e) => Err(map_error("head", name, e)),
            }
        })
    }

    fn delete(&self, name: &str) -> Result<()> {
        let path = self.object_path(name)?;
        let store = self.store();
        self.with_retries(|_| {
            let (store, path) = (Arc::clone(&store), path.clone());
            match self.block_on(async move { store.delete(&path).await })? {
                Ok(()) => Ok(()),
                Err(e @ object_store::Error::NotFound { .. }) if !no_bucket(&e) => Ok(()),
                Err(e) => Err(map_error("delete", name, e)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn backoff_doubles_up_to_its_bound() {
        let ms = Duration::from_millis;
        let waits: Vec<Duration> = (0..8).map(|a| backoff(ms(100), a)).collect();
        assert_eq!(
            waits,
            [100, 200, 400, 800, 1600, 3200, 6400, 10_000].map(ms)
        );
        assert_eq!(backoff(ms(100), 20), MAX_BACKOFF);
        assert_eq!(backoff(Duration::MAX, 31), MAX_BACKOFF);
    }

    use super::*;

    fn memory(threshold: u64, part: usize) -> ObjectStorage {
        let options = ObjectStorageOptions {
            multipart_threshold: threshold,
            part_size: part,
            ..ObjectStorageOptions::default()
        };
        ObjectStorage::open("memory:///root/x", &options).unwrap()
    }

    #[test]
    fn memory_round_trip_and_multipart() {
        let s = memory(1000, 300);
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..2500u32).map(|i| (i * 7 % 251) as u8).collect();
        let src = dir.path().join("src");
        std::fs::write(&src, &data).unwrap();
        let d = s.put_file("shared/a.sst", &src).unwrap();
        assert_eq!(d.size, 2500);
        assert_eq!(d.crc32, crc32fast::hash(&data));
        // A multipart put of a taken name: the same bytes count (a retry after an ambiguous
        // failure), other bytes are refused and the object stays as it was.
        assert_eq!(s.put_file("shared/a.sst", &src).unwrap(), d);
        let other = dir.path().join("other");
        std::fs::write(&other, vec![1u8; 2500]).unwrap();
        assert!(matches!(
            s.put_file("shared/a.sst", &other),
            Err(Error::ObjectExists { .. })
        ));
        assert!(s.get_bytes("shared/a.sst").unwrap() == data);
        // No staging object is left behind, and staging names are reserved.
        assert!(s.list_all(STAGING_PREFIX).unwrap().is_empty());
        assert!(matches!(
            s.put_bytes(".uploads/x", b""),
            Err(Error::InvalidObjectName(_))
        ));
        let dst = dir.path().join("dst");
        assert_eq!(s.get_file("shared/a.sst", &dst).unwrap(), d);
        assert_eq!(std::fs::read(&dst).unwrap(), data);
        // The durable get (the trait's default: get, then fsync) places the same bytes.
        let durable = dir.path().join("durable");
        assert_eq!(s.get_file_durable("shared/a.sst", &durable).unwrap(), d);
        assert_eq!(std::fs::read(&durable).unwrap(), data);
        assert!(s.get_file_durable("shared/a.sst", &durable).is_err());
        // Small puts: create-if-absent, identical bytes after an ambiguous failure count.
        s.put_bytes("chk-1/b/_metadata", b"one").unwrap();
        s.put_bytes("chk-1/b/_metadata", b"one").unwrap();
        assert!(matches!(
            s.put_bytes("chk-1/b/_metadata", b"two"),
            Err(Error::ObjectExists { .. })
        ));
        assert_eq!(s.get_bytes("chk-1/b/_metadata").unwrap(), b"one");
        let mut names: Vec<_> = s.list("").unwrap().into_iter().map(|o| o.name).collect();
        names.sort();
        assert_eq!(names, ["chk-1/b/_metadata", "shared/a.sst"]);
        assert_eq!(s.list("chk-").unwrap().len(), 1);
        assert_eq!(s.list("shared/a").unwrap().len(), 1);
        assert_eq!(s.list("shared/b").unwrap().len(), 0);
        s.delete("shared/a.sst").unwrap();
        s.delete("shared/a.sst").unwrap();
        assert!(matches!(
            s.get_bytes("shared/a.sst"),
            Err(Error::ObjectNotFound { .. })
        ));
        let empty = dir.path().join("empty");
        std::fs::write(&empty, b"").unwrap();
        assert_eq!(s.put_file("e", &empty).unwrap().size, 0);
        assert!(s.get_bytes("e").unwrap().is_empty());
    }

    #[test]
    fn transient_errors_are_retried_permanent_ones_are_not() {
        let mut s = memory(1 << 20, 1 << 20);
        s.options.initial_backoff = Duration::from_millis(1);
        let transient = || Error::Storage {
            operation: "put",
            name: "x".into(),
            detail: "503".into(),
            transient: true,
        };
        let mut calls = 0;
        let r = s.with_retries(|attempt| {
            calls += 1;
            assert_eq!(attempt, calls - 1);
            if calls < 3 {
                Err(transient())
            } else {
                Ok(7)
            }
        });
        assert_eq!((r.unwrap(), calls), (7, 3));
        calls = 0;
        let r: Result<()> = s.with_retries(|_| {
            calls += 1;
            Err(transient())
        });
        assert!(r.is_err());
        assert_eq!(calls, 1 + s.options.retries);
        calls = 0;
        let r: Result<()> = s.with_retries(|_| {
            calls += 1;
            Err(Error::ObjectNotFound { name: "x".into() })
        });
        assert!(matches!(r, Err(Error::ObjectNotFound { .. })));
        assert_eq!(calls, 1);
    }

    #[test]
    fn a_conflict_is_a_taken_name_only_for_a_put() {
        let conflict = || object_store::Error::AlreadyExists {
            path: "x/y".into(),
            source: "status code: 409 Conflict, OperationAborted".into(),
        };
        assert!(matches!(
            map_error("put", "x/y", conflict()),
            Error::ObjectExists { .. }
        ));
        for operation in ["get", "head", "delete", "list"] {
            let e = map_error(operation, "x/y", conflict());
            assert!(
                matches!(
                    e,
                    Error::Storage {
                        transient: true,
                        ..
                    }
                ),
                "{operation}: {e:?}"
            );
        }
    }

    #[test]
    fn works_inside_a_tokio_runtime() {
        let s = Arc::new(memory(1 << 20, 1 << 20));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let s2 = Arc::clone(&s);
        rt.block_on(async move {
            s2.put_bytes("x/y", b"hello").unwrap();
            assert_eq!(s2.get_bytes("x/y").unwrap(), b"hello");
        });
        // Dropping the storage inside an async context must not panic either.
        rt.block_on(async move { drop(s) });
    }

    #[test]
    fn bad_urls_are_typed_errors() {
        let o = ObjectStorageOptions::default();
        for url in ["gs://b/p", "s3://", "nonsense"] {
            assert!(
                matches!(
                    ObjectStorage::open(url, &o),
                    Err(Error::InvalidStorageUrl { .. })
                ),
                "{url}"
            );
        }
        let bad = ObjectStorageOptions {
            s3: vec![("no_such_key".into(), "1".into())],
            ..o
        };
        assert!(matches!(
            ObjectStorage::open("s3://bucket/p", &bad),
            Err(Error::InvalidStorageUrl { .. })
        ));
    }
}
