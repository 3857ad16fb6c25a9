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
