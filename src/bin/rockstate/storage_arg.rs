//! The storage argument of the operator commands, parsed in one place: a local directory
//! (`/path`, `./path` or `file:///path`) or `s3://bucket/prefix` (endpoint and credentials from
//! `AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`).

use std::path::PathBuf;
use std::sync::Arc;

use rockstate::{CheckpointStorage, LocalStorage};

use crate::ops::CliError;

/// Where checkpoints live, as the user named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageUrl {
    /// A local (or mounted) directory.
    Local(PathBuf),
    /// An S3 bucket and key prefix.
    S3 {
        /// Bucket name.
        bucket: String,
        /// Key prefix (may be empty).
        prefix: String,
    },
}

/// Parses a storage argument. Unknown `scheme://` prefixes are an error.
pub fn parse(arg: &str) -> Result<StorageUrl, String> {
    if arg.is_empty() {
        return Err("empty storage argument".into());
    }
    if let Some(path) = arg.strip_prefix("file://") {
        if path.is_empty() {
            return Err(format!("`{arg}` names no path"));
        }
        return Ok(StorageUrl::Local(PathBuf::from(path)));
    }
    if let Some(rest) = arg.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(format!("`{arg}` names no bucket"));
        }
        return Ok(StorageUrl::S3 {
            bucket: bucket.to_string(),
            prefix: prefix.trim_end_matches('/').to_string(),
        });
    }
    if let Some((scheme, _)) = arg.split_once("://") {
        return Err(format!(
            "unknown storage scheme `{scheme}://` (use a directory, file:// or s3://)"
        ));
    }
    Ok(StorageUrl::Local(PathBuf::from(arg)))
}

/// Opens an existing storage for the operator commands (a missing directory is an error,
/// never created).
pub fn open(arg: &str) -> Result<Arc<dyn CheckpointStorage>, CliError> {
    match parse(arg).map_err(CliError::usage)? {
        StorageUrl::Local(path) => {
            if !path.is_dir() {
                return Err(CliError::storage(format!(
                    "{}: not a directory",
                    path.display()
                )));
            }
            let s =
                LocalStorage::open_existing(&path).map_err(|e| CliError::storage(e.to_string()))?;
            Ok(Arc::new(s))
        }
        StorageUrl::S3 { .. } => rockstate::storage::open_storage(
            arg,
            &rockstate::storage::ObjectStorageOptions::default(),
        )
        .map_err(|e| CliError::storage(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        assert_eq!(parse("/a/b"), Ok(StorageUrl::Local("/a/b".into())));
        assert_eq!(parse("file:///a"), Ok(StorageUrl::Local("/a".into())));
        assert_eq!(
            parse("s3://bkt/jobs/1/"),
            Ok(StorageUrl::S3 {
                bucket: "bkt".into(),
                prefix: "jobs/1".into()
            })
        );
        assert!(parse("s3://").is_err());
        assert!(parse("gs://x").is_err());
        assert!(parse("").is_err());
    }
}
