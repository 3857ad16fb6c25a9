//! Rules of the code base that the compiler does not check, checked over the source tree:
//! time is read only through the clock module, RocksDB is named only by the database layer,
//! the modules below the `KeyedBackend` facade do not import it, and the top-level modules
//! form no cycle.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The lines of `file` that contain `needle` outside `//` comments, as `path:line: text`.
fn uses(file: &Path, needle: &str) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            l.split("//")
                .next()
                .is_some_and(|code| code.contains(needle))
        })
        .map(|(i, l)| format!("{}:{}: {}", file.display(), i + 1, l.trim()))
        .collect()
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_wall_clock_is_read_only_by_the_clock_module() {
    let clock = root().join("src/clock.rs");
    let mut found = Vec::new();
    for dir in [
        "src",
        "tests",
        "benches",
        "examples",
        "sst-format/src",
        "rockstate-timely/src",
        "rockstate-timely/tests",
    ] {
        for f in rust_files(&root().join(dir)) {
            if f != clock {
                // Spelled in two parts so this file does not find itself.
                found.extend(uses(&f, concat!("SystemTime", "::now")));
            }
        }
    }
    assert!(
        found.is_empty(),
        "read time through rockstate::Clock (src/clock.rs) instead:\n{}",
        found.join("\n")
    );
}

#[test]
fn only_the_database_layer_names_rocksdb() {
    let mut found = Vec::new();
    for f in rust_files(&root().join("src")) {
        if f.starts_with(root().join("src/db")) {
            continue;
        }
        for needle in [concat!("rocksdb", "::"), concat!("librocksdb", "_sys")] {
            found.extend(uses(&f, needle));
        }
    }
    assert!(
        found.is_empty(),
        "RocksDB belongs to the database layer (src/db/):\n{}",
        found.join("\n")
    );
}

#[test]
fn modules_below_the_facade_do_not_import_it() {
    // The facade (`backend.rs`) sits on top; the job level (`coordinator.rs`, `barrier.rs`) and
    // the crate root may use it.
    let above = [
        "backend.rs",
        "coordinator.rs",
        "barrier.rs",
        "lib.rs",
        "savepoint.rs",
    ];
    let src = root().join("src");
    let mut found = Vec::new();
    for f in rust_files(&src) {
        let rel = f.strip_prefix(&src).unwrap();
        if rel.starts_with("bin") || above.iter().any(|a| rel == Path::new(a)) {
            continue;
        }
        found.extend(uses(&f, concat!("crate::", "backend")));
    }
    assert!(
        found.is_empty(),
        "modules below the facade must not import it (pass what they need as plain data):\n{}",
        found.join("\n")
    );
}

/// The top-level modules of `src/` (files and directories, without `lib.rs` and `bin/`) and
/// the other top-level modules each names as `crate::<module>` outside comments (in paths and
/// in `use crate::{…}` groups).
fn module_graph() -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let src = root().join("src");
    let mut names = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let p = entry.unwrap().path();
        let name = p.file_stem().unwrap().to_string_lossy().to_string();
        if name != "lib" && name != "bin" && (p.is_dir() || name != "main") {
            names.insert(name);
        }
    }
    let mut graph = std::collections::BTreeMap::new();
    for name in &names {
        let (file, dir) = (src.join(format!("{name}.rs")), src.join(name));
        let files = if dir.is_dir() {
            rust_files(&dir)
        } else {
            vec![file]
        };
        let mut deps = std::collections::BTreeSet::new();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for line in text.lines() {
                let code = line.split("//").next().unwrap_or("");
                let mut rest = code;
                while let Some(i) = rest.find("crate::") {
                    rest = &rest[i + "crate::".len()..];
                    let group = rest
                        .strip_prefix('{')
                        .map(|g| g.split('}').next().unwrap_or(""));
                    let words: Vec<&str> = match group {
                        Some(g) => g.split(',').map(|w| w.trim()).collect(),
                        None => vec![rest],
                    };
                    for w in words {
                        let m: String = w
                            .chars()
                            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                            .collect();
                        if m != *name && names.contains(&m) {
                            deps.insert(m);
                        }
                    }
                }
            }
        }
        graph.insert(name.clone(), deps);
    }
    graph
}

#[test]
fn top_level_modules_form_no_cycle() {
    let graph = module_graph();
    assert!(graph.len() > 20, "modules found: {:?}", graph.keys());
    // Depth-first search for a back edge; reports the cycle it closes.
    fn visit(
        m: &str,
        graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut cycle = path[i..].to_vec();
            cycle.push(m.to_string());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for d in &graph[m] {
            if let Some(c) = visit(d, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = std::collections::BTreeSet::new();
    for m in graph.keys() {
        if let Some(cycle) = visit(m, &graph, &mut Vec::new(), &mut done) {
            panic!("module cycle: {}", cycle.join(" -> "));
        }
    }
}
