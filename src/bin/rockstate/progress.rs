//! Progress bars for long work (the demo, the benches): drawn to stderr, hidden when stderr is
//! not a terminal, counts and rates in human units.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar over `len` items called `unit`, labelled `label`. Hidden when stderr is not a
/// terminal (indicatif's stderr target draws nothing then), so piped output stays clean.
pub fn bar(len: u64, unit: &str, label: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    let template = format!(
        "{{msg:>14}} [{{bar:30}}] {{human_pos}}/{{human_len}} {unit} ({{per_sec}}, eta {{eta}})"
    );
    // The template is a constant apart from `unit`, which contains no braces: it parses.
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(label.to_string());
    bar
}

/// `1.5 KiB`-style size.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
