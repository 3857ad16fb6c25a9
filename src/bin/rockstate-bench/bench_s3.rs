//! `rockstate-bench s3`: upload and download throughput of [`ObjectStorage`] (our synchronous
//! facade: parallel transfer threads, multipart for large files, digests) against raw
//! `object_store` puts and gets of the same bytes to the same server, measured in the same
//! run, interleaved, median of `rounds`.
//!
//! Point it at any S3-compatible server: `--storage s3://bucket/prefix` with the endpoint and
//! credentials in `AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`. The
//! checkpoint workload runs against the same kind of URL with
//! `rockstate-bench checkpoint --storage s3://bucket/prefix`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use rand::{RngCore, SeedableRng};
use rockstate::{CheckpointStorage, Error, ObjectStorage, ObjectStorageOptions};

use crate::report::Line;
use crate::support::{io, median};

/// Arguments of `bench s3`.
#[derive(clap::Args, Debug)]
pub struct S3Args {
    /// Storage URL (`s3://bucket/prefix`; `memory://` works too).
    #[arg(long)]
    storage: String,
    /// Number of files per round.
    #[arg(long, default_value_t = 8)]
    files: usize,
    /// Size of each file in MiB.
    #[arg(long, default_value_t = 32)]
    file_mib: usize,
    /// Parallel transfers (both sides).
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Multipart threshold of our storage in MiB (default: ObjectStorageOptions's). When the
    /// files reach it, the raw baseline also uploads in parts (same part size and parts in
    /// flight), and a second ratio against raw single puts is printed.
    #[arg(long)]
    multipart_mib: Option<u64>,
    /// Part size of multipart uploads in MiB, ours and raw (default: ObjectStorageOptions's).
    #[arg(long)]
    part_mib: Option<usize>,
    /// Rounds (median reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

fn raw_error(e: object_store::Error) -> Error {
    Error::Storage {
        operation: "raw object_store",
        name: String::new(),
        detail: e.to_string(),
        transient: false,
    }
}

/// Runs `job(i)` for every file index on `threads` threads.
fn parallel(
    files: usize,
    threads: usize,
    job: impl Fn(usize) -> rockstate::Result<()> + Sync,
) -> rockstate::Result<()> {
    let next = AtomicUsize::new(0);
    let errors = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= files {
                    return;
                }
                if let Err(e) = job(i) {
                    if let Ok(mut errs) = errors.lock() {
                        errs.push(e);
                    }
                    return;
                }
            });
        }
    });
    match errors.into_inner().ok().and_then(|mut e| e.pop()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Raw baseline: `threads` concurrent `put`s / `get`s on a tokio runtime of our own.
struct Raw {
    store: Arc<dyn ObjectStore>,
    rt: tokio::runtime::Runtime,
    threads: usize,
}

/// Each file's object path and bytes, read before the timed transfers start.
fn read_files(
    storage: &ObjectStorage,
    names: &[String],
    files: &[PathBuf],
) -> rockstate::Result<Vec<(object_store::path::Path, Bytes)>> {
    names
        .iter()
        .zip(files)
        .map(|(name, file)| {
            let bytes = Bytes::from(std::fs::read(file).map_err(io(file))?);
            Ok((storage.object_path(name)?, bytes))
        })
        .collect()
}

impl Raw {
    fn upload(
        &self,
        storage: &ObjectStorage,
        names: &[String],
        files: &[PathBuf],
    ) -> rockstate::Result<()> {
        let jobs = read_files(storage, names, files)?;
        let store = Arc::clone(&self.store);
        let threads = self.threads;
        self.rt.block_on(async move {
            futures::stream::iter(jobs)
                .map(|(path, bytes)| {
                    let store = Arc::clone(&store);
                    async move { store.put(&path, PutPayload::from(bytes)).await }
                })
                .buffer_unordered(threads)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .try_for_each(|r| r.map(|_| ()))
                .map_err(raw_error)
        })
    }

    /// Uploads each file as a multipart upload of `part_size` parts, `part_concurrency` parts
    /// of a file in flight, `threads` files at once: what our storage sends, minus the
    /// `If-None-Match` condition on the completion.
    fn upload_multipart(
        &self,
        storage: &ObjectStorage,
        names: &[String],
        files: &[PathBuf],
        part_size: usize,
        part_concurrency: usize,
    ) -> rockstate::Result<()> {
        let jobs = read_files(storage, names, files)?;
        let store = Arc::clone(&self.store);
        let threads = self.threads;
        self.rt.block_on(async move {
            futures::stream::iter(jobs)
                .map(|(path, bytes)| {
                    let store = Arc::clone(&store);
                    async move {
                        let mut upload = store.put_multipart(&path).await?;
                        let parts: Vec<_> = (0..bytes.len().div_ceil(part_size).max(1))
                            .map(|i| {
                                let end = ((i + 1) * part_size).min(bytes.len());
                                upload.put_part(PutPayload::from(bytes.slice(i * part_size..end)))
                            })
                            .collect();
                        futures::stream::iter(parts)
                            .buffer_unordered(part_concurrency)
                            .collect::<Vec<_>>()
                            .await
                            .into_iter()
                            .collect::<object_store::Result<Vec<()>>>()?;
                        upload.complete().await.map(|_| ())
                    }
                })
                .buffer_unordered(threads)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .try_for_each(|r| r)
                .map_err(raw_error)
        })
    }

    fn download(
        &self,
        storage: &ObjectStorage,
        names: &[String],
        dir: &Path,
    ) -> rockstate::Result<()> {
        let mut jobs = Vec::new();
        for (i, name) in names.iter().enumerate() {
            jobs.push((storage.object_path(name)?, dir.join(format!("raw-{i}"))));
        }
        let store = Arc::clone(&self.store);
        let threads = self.threads;
        self.rt.block_on(async move {
            futures::stream::iter(jobs)
                .map(|(path, local)| {
                    let store = Arc::clone(&store);
                    async move {
                        let bytes = store
                            .get(&path)
                            .await
                            .map_err(raw_error)?
                            .bytes()
                            .await
                            .map_err(raw_error)?;
                        std::fs::write(&local, &bytes).map_err(io(&local))
                    }
                })
                .buffer_unordered(threads)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<rockstate::Result<()>>()
        })
    }
}

/// Runs the benchmark.
pub fn run(args: &S3Args) -> rockstate::Result<()> {
    let mut options = ObjectStorageOptions::default();
    if let Some(mib) = args.multipart_mib {
        options.multipart_threshold = mib << 20;
    }
    if let Some(mib) = args.part_mib {
        options.part_size = mib << 20;
    }
    let multipart = (args.file_mib as u64) << 20 >= options.multipart_threshold;
    let storage = ObjectStorage::open(&args.storage, &options)?;
    let tmp = std::env::temp_dir();
    let dir = tempfile::tempdir_in(&tmp).map_err(io(&tmp))?;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let mut files = Vec::new();
    for i in 0..args.files {
        let path = dir.path().join(format!("src-{i}"));
        let mut bytes = vec![0u8; args.file_mib << 20];
        rng.fill_bytes(&mut bytes);
        std::fs::write(&path, &bytes).map_err(io(&path))?;
        files.push(path);
    }
    let total = (args.files * (args.file_mib << 20)) as f64;
    let raw = Raw {
        store: storage.store(),
        rt: tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(io(dir.path()))?,
        threads: args.threads,
    };
    Line::header()
        .label("bench s3:")
        .text("storage", args.storage.clone())
        .int("files", args.files as u64)
        .int("file_mib", args.file_mib as u64)
        .int("threads", args.threads as u64)
        .int("rounds", args.rounds as u64)
        .int("multipart_threshold_mib", options.multipart_threshold >> 20)
        .int("part_mib", (options.part_size >> 20) as u64)
        .int("part_concurrency", options.part_concurrency as u64)
        .print();
    let run_id = format!("{:016x}", rand::random::<u64>());
    let (mut ours_up, mut raw_up, mut ours_down, mut raw_down) = (vec![], vec![], vec![], vec![]);
    let mut raw_single_up = vec![];
    for round in 0..args.rounds {
        let ours_names: Vec<String> = (0..args.files)
            .map(|i| format!("bench-{run_id}/r{round}/ours-{i}"))
            .collect();
        let raw_names: Vec<String> = (0..args.files)
            .map(|i| format!("bench-{run_id}/r{round}/raw-{i}"))
            .collect();
        let single_names: Vec<String> = (0..args.files)
            .map(|i| format!("bench-{run_id}/r{round}/single-{i}"))
            .collect();
        // Alternate which side goes first, so neither always meets a warmer server.
        let ours_first = round % 2 == 0;
        let down = dir.path().join(format!("down-{round}"));
        std::fs::create_dir_all(&down).map_err(io(&down))?;
        for ours in [ours_first, !ours_first] {
            let t = Instant::now();
            if ours {
                parallel(args.files, args.threads, |i| {
                    storage.put_file(&ours_names[i], &files[i]).map(|_| ())
                })?;
                ours_up.push(t.elapsed());
            } else if multipart {
                raw.upload_multipart(
                    &storage,
                    &raw_names,
                    &files,
                    options.part_size,
                    options.part_concurrency,
                )?;
                raw_up.push(t.elapsed());
                let t = Instant::now();
                raw.upload(&storage, &single_names, &files)?;
                raw_single_up.push(t.elapsed());
            } else {
                raw.upload(&storage, &raw_names, &files)?;
                raw_up.push(t.elapsed());
            }
        }
        for ours in [ours_first, !ours_first] {
            let t = Instant::now();
            if ours {
                parallel(args.files, args.threads, |i| {
                    storage
                        .get_file(&ours_names[i], &down.join(format!("ours-{i}")))
                        .map(|_| ())
                })?;
                ours_down.push(t.elapsed());
            } else {
                raw.download(&storage, &raw_names, &down)?;
                raw_down.push(t.elapsed());
            }
        }

        std::fs::remove_dir_all(&down).map_err(io(&down))?;
        for name in ours_names.iter().chain(&raw_names) {
            storage.delete(name)?;
        }
        if multipart {
            for name in &single_names {
                storage.delete(name)?;
            }
        }
    }
    let mbs = |d: Duration| total / d.as_secs_f64() / (1 << 20) as f64;
    let (ou, ru, od, rd) = (
        median(ours_up),
        median(raw_up),
        median(ours_down),
        median(raw_down),
    );
    let up_label = if multipart {
        "s3 upload (multipart, raw multipart):"
    } else {
        "s3 upload:"
    };
    let mut lines = vec![(up_label, ou, ru), ("s3 download:", od, rd)];
    if multipart {
        lines.push((
            "s3 upload (multipart, raw single put):",
            ou,
            median(raw_single_up),
        ));
    }
    for (what, ours, raw) in lines {
        Line::header()
            .label(what)
            .num("rockstate_mib_s", mbs(ours), 1)
            .num("raw_object_store_mib_s", mbs(raw), 1)
            .num("ratio", raw.as_secs_f64() / ours.as_secs_f64(), 3)
            .note(format!("median of {}, target >= 0.8", args.rounds))
            .print();
    }
    Ok(())
}
