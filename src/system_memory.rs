//! How much memory the process can still fill with page cache without evicting what is
//! already there: the kernel's `MemAvailable` (free memory and the page cache it can
//! reclaim), bounded by the memory limit of the process's cgroup less the anonymous memory
//! charged to it. A job in a container of 4 GiB on a host of 64 GiB sees the host's figure in
//! `/proc/meminfo`, while the page cache it fills is charged to its container and reclaimed
//! there, from its own files first.
//!
//! The cgroup is found as the kernel shows it: its path in `/proc/self/cgroup`, the
//! hierarchy's mount in `/proc/self/mountinfo` (a container's cgroup namespace or bind
//! mount shows its own cgroup at the mount's root). cgroup v2: every `memory.max` from the
//! process's cgroup up to the mount, each less the `anon` of its `memory.stat`. cgroup v1:
//! `hierarchical_memory_limit` less `total_rss` of the process's memory cgroup's
//! `memory.stat` (the limit already counts its ancestors'). The smallest figure wins; a
//! hierarchy that is missing, unreadable or unlimited bounds nothing.

use std::path::{Path, PathBuf};

/// Limits at or above this are "no limit" (cgroup v1 writes `PAGE_COUNTER_MAX` pages).
const UNLIMITED: u64 = 1 << 62;

/// The memory the process can still fill with page cache, in bytes: `MemAvailable`, bounded
/// by its cgroups' limits. `None` where the kernel reports no `MemAvailable` (not Linux).
pub(crate) fn available() -> Option<u64> {
    let host = mem_available(&std::fs::read_to_string("/proc/meminfo").ok()?)?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    Some(match cgroup_available(&mountinfo, &cgroups) {
        Some(limited) => limited.min(host),
        None => host,
    })
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let kib = line.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?;
    kib.checked_mul(1024)
}

/// What the process's cgroups leave it (see the module docs), from the texts of
/// `/proc/self/mountinfo` and `/proc/self/cgroup`; `None` where no limit applies.
fn cgroup_available(mountinfo: &str, cgroups: &str) -> Option<u64> {
    let v2 = cgroups
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .and_then(|path| Some((mount_of(mountinfo, |fs, _| fs == "cgroup2")?, path)))
        .and_then(|(mount, path)| v2_available(&mount.dir_of(path)?, &mount.point));
    let v1 = cgroups
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once(':')?;
            let (controllers, path) = rest.split_once(':')?;
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then_some(path)
        })
        .and_then(|path| {
            let mount = mount_of(mountinfo, |fs, options| {
                fs == "cgroup" && options.split(',').any(|o| o == "memory")
            })?;
            v1_available(&mount.dir_of(path)?)
        });
    match (v2, v1) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A cgroup hierarchy's mount: the cgroup at its root, and where it is mounted.
struct Mount {
    root: String,
    point: PathBuf,
}

impl Mount {
    /// The directory of the cgroup at `path` (as `/proc/self/cgroup` names it) under this
    /// mount; the mount's point where the path lies outside its root (a namespace shows the
    /// process's own cgroup as `/`).
    fn dir_of(&self, path: &str) -> Option<PathBuf> {
        let rel = match path.strip_prefix(self.root.trim_end_matches('/')) {
            Some(rel) if rel.is_empty() || rel.starts_with('/') => rel,
            _ => "",
        };
        let mut dir = self.point.clone();
        for part in rel.split('/').filter(|p| !p.is_empty()) {
            if part == ".." {
                return None;
            }
            dir.push(part);
        }
        Some(dir)
    }
}

/// The first mount in `mountinfo` whose file system type and super options `matches`.
fn mount_of(mountinfo: &str, matches: impl Fn(&str, &str) -> bool) -> Option<Mount> {
    mountinfo.lines().find_map(|line| {
        // "<id> <parent> <major:minor> <root> <point> <options> [optional...] - <fs>
        //  <source> <super options>"
        let (head, tail) = line.split_once(" - ")?;
        let mut tail = tail.split_whitespace();
        let fs = tail.next()?;
        let _source = tail.next()?;
        let options = tail.next().unwrap_or("");
        if !matches(fs, options) {
            return None;
        }
        let mut head = head.split_whitespace();
        let root = head.nth(3)?;
        let point = head.next()?;
        Some(Mount {
            root: unescape(root),
            point: PathBuf::from(unescape(point)),
        })
    })
}

/// A mountinfo field with its octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            let s = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(s, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// cgroup v2: the smallest `memory.max` less `anon` from `dir` up to the mount `point`.
fn v2_available(dir: &Path, point: &Path) -> Option<u64> {
    let mut best: Option<u64> = None;
    let mut at = Some(dir);
    while let Some(d) = at {
        let limit = read(&d.join("memory.max")).and_then(|s| s.trim().parse::<u64>().ok());
        if let Some(limit) = limit.filter(|&l| l < UNLIMITED) {
            let anon = read(&d.join("memory.stat"))
                .and_then(|s| stat_value(&s, "anon"))
                .unwrap_or(0);
            let left = limit.saturating_sub(anon);
            best = Some(best.map_or(left, |b| b.min(left)));
        }
        if d == point {
            break;
        }
        at = d.parent().filter(|p| p.starts_with(point));
    }
    best
}

/// cgroup v1: `hierarchical_memory_limit` less `total_rss` of the memory cgroup at `dir`.
fn v1_available(dir: &Path) -> Option<u64> {
    let stat = read(&dir.join("memory.stat"))?;
    let limit = stat_value(&stat, "hierarchical_memory_limit").filter(|&l| l < UNLIMITED)?;
    let rss = stat_value(&stat, "total_rss").unwrap_or(0);
    Some(limit.saturating_sub(rss))
}

/// The value of `key` in a `memory.stat` text (`<key> <value>` per line).
fn stat_value(stat: &str, key: &str) -> Option<u64> {
    stat.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_available_is_read_in_bytes() {
        let meminfo = "MemTotal:       24573452 kB\nMemFree:         1000000 kB\n\
                       MemAvailable:   20000000 kB\nBuffers: 1 kB\n";
        assert_eq!(mem_available(meminfo), Some(20_000_000 * 1024));
        assert_eq!(mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(mem_available("MemAvailable: lots\n"), None);
        assert_eq!(mem_available("MemAvailable: 5 MB\n"), None);
    }

    /// Writes `files` (path relative to `root`, contents) under `root`.
    fn write(root: &Path, files: &[(&str, &str)]) {
        for (path, text) in files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }

    fn v2_mountinfo(point: &Path, root: &str) -> String {
        format!(
            "30 23 0:26 {root} {} rw,nosuid,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n",
            point.display()
        )
    }

    #[test]
    fn cgroup_v2_takes_the_smallest_limit_up_the_tree_less_its_anonymous_memory() {
        let dir = tempfile::tempdir().unwrap();
        let point = dir.path().join("cg");
        write(
            &point,
            &[
                ("memory.max", "max\n"),
                ("kubepods/memory.max", "8000000\n"),
                ("kubepods/memory.stat", "anon 1000000\nfile 5000000\n"),
                ("kubepods/pod1/memory.max", "max\n"),
                ("kubepods/pod1/memory.stat", "anon 900000\n"),
                ("kubepods/pod1/job/memory.max", "9000000\n"),
                (
                    "kubepods/pod1/job/memory.stat",
                    "anon 500000\nfile 7000000\n",
                ),
            ],
        );
        let mountinfo = v2_mountinfo(&point, "/");
        // The parent's limit less its anonymous memory is the smaller.
        assert_eq!(
            cgroup_available(&mountinfo, "0::/kubepods/pod1/job\n"),
            Some(7_000_000)
        );
        // No limit anywhere on the way up.
        assert_eq!(cgroup_available(&mountinfo, "0::/\n"), None);
        // Anonymous memory above the limit leaves nothing.
        write(&point, &[("kubepods/memory.stat", "anon 9000000\n")]);
        assert_eq!(
            cgroup_available(&mountinfo, "0::/kubepods/pod1/job\n"),
            Some(0)
        );
    }

    #[test]
    fn a_namespaced_cgroup_is_read_at_the_mount_point() {
        let dir = tempfile::tempdir().unwrap();
        let point = dir.path().join("sys fs");
        write(
            &point,
            &[
                ("memory.max", "4294967296\n"),
                ("memory.stat", "anon 294967296\n"),
            ],
        );
        // The mount point escapes its space in mountinfo.
        let escaped = point.display().to_string().replace(' ', "\\040");
        let mountinfo = format!("30 23 0:26 / {escaped} rw - cgroup2 cgroup2 rw\n");
        assert_eq!(cgroup_available(&mountinfo, "0::/\n"), Some(4_000_000_000));
        // A container's mount of its own cgroup: root /docker/abc, the process in it.
        let mountinfo = format!("30 23 0:26 /docker/abc {escaped} rw - cgroup2 cgroup2 rw\n");
        assert_eq!(
            cgroup_available(&mountinfo, "0::/docker/abc\n"),
            Some(4_000_000_000)
        );
        // A path outside the mount's root reads the mount point.
        assert_eq!(
            cgroup_available(&mountinfo, "0::/elsewhere\n"),
            Some(4_000_000_000)
        );
    }

    #[test]
    fn cgroup_v1_takes_the_hierarchical_limit_less_total_rss() {
        let dir = tempfile::tempdir().unwrap();
        let point = dir.path().join("memory");
        write(
            &point,
            &[
                (
                    "process_api/a1/memory.stat",
                    "cache 11223040\nrss 2715648\nhierarchical_memory_limit 2147483648\n\
                     total_cache 9\ntotal_rss 147483648\n",
                ),
                (
                    "free/memory.stat",
                    "hierarchical_memory_limit 9223372036854771712\ntotal_rss 1\n",
                ),
            ],
        );
        let mountinfo = format!(
            "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n\
             32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n\
             35 31 0:32 / {} rw - cgroup cgroup rw,memory\n",
            point.display()
        );
        let cgroups = "9:name=systemd:/\n4:memory:/process_api/a1\n1:cpu:/\n0::/\n";
        assert_eq!(cgroup_available(&mountinfo, cgroups), Some(2_000_000_000));
        // Unlimited: no bound.
        assert_eq!(cgroup_available(&mountinfo, "4:memory:/free\n0::/\n"), None);
        // Both hierarchies: the smaller wins.
        let v2_point = dir.path().join("unified");
        write(
            &v2_point,
            &[("memory.max", "1000000000\n"), ("memory.stat", "anon 0\n")],
        );
        let both = format!("{mountinfo}{}", v2_mountinfo(&v2_point, "/"));
        assert_eq!(cgroup_available(&both, cgroups), Some(1_000_000_000));
    }

    #[test]
    fn missing_or_unreadable_hierarchies_bound_nothing() {
        assert_eq!(cgroup_available("", "0::/\n"), None);
        assert_eq!(cgroup_available("garbage\n", "garbage\n"), None);
        let dir = tempfile::tempdir().unwrap();
        let mountinfo = v2_mountinfo(dir.path(), "/");
        assert_eq!(cgroup_available(&mountinfo, "0::/a/../../etc\n"), None);
        assert_eq!(cgroup_available(&mountinfo, "0::/nothing/here\n"), None);
        write(dir.path(), &[("memory.max", "not a number\n")]);
        assert_eq!(cgroup_available(&mountinfo, "0::/\n"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_machine_reports_at_most_its_mem_available() {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
        let host = mem_available(&meminfo).unwrap();
        let available = available().unwrap();
        // MemAvailable moves between the two reads; the bound never adds memory.
        assert!(available <= host + (host / 10), "{available} of {host}");
    }
}
