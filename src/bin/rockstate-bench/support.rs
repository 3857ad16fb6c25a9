//! What the benches share besides their output lines: the median of repeated measurements,
//! the checkpoint storage a run writes to, and the error of a failed file-system call on a
//! path.

use std::path::Path;
use std::sync::Arc;

use rockstate::{CheckpointStorage, LocalStorage};

/// The median of `v` (of an even count, the upper of the two middle values); the default
/// value when `v` is empty. Values that do not compare (NaN) count as equal.
pub fn median<T: PartialOrd + Copy + Default>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// The checkpoint storage `name` of a run: `<url>/<name>` when the bench was given a storage
/// URL (`--storage`), else a LocalStorage directory `storage-<name>` under `root`.
pub fn storage_named(
    url: Option<&str>,
    root: &Path,
    name: &str,
) -> rockstate::Result<Arc<dyn CheckpointStorage>> {
    Ok(match url {
        Some(url) => rockstate::open_storage(
            &format!("{}/{name}", url.trim_end_matches('/')),
            &rockstate::ObjectStorageOptions::default(),
        )?,
        None => Arc::new(LocalStorage::new(root.join(format!("storage-{name}")))?),
    })
}

/// Maps an I/O error of an operation on `path` to the crate's error.
pub fn io(path: &Path) -> impl FnOnce(std::io::Error) -> rockstate::Error + '_ {
    move |e| rockstate::Error::Io {
        path: path.to_path_buf(),
        source: e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_the_middle_or_the_upper_middle() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4, 1, 3, 2]), 3);
        assert_eq!(median(Vec::<u64>::new()), 0);
    }
}
