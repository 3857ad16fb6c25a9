//! Hand-written SVG charts of bench results: uploaded bytes per checkpoint, one bar series per
//! checkpoint mode (incremental, full, changelog), on a linear byte axis with a legend.

use std::fmt::Write as _;

use crate::progress::human_bytes;

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLORS: [&str; 4] = ["#2b7bba", "#e4572e", "#4caf50", "#8e44ad"];

/// An SVG document: grouped bars of uploaded bytes per checkpoint (x: checkpoint 1, 2, …;
/// y: bytes), one colour per `(name, uploaded bytes per checkpoint)` series, with a legend.
pub fn uploaded_per_checkpoint(series: &[(&str, Vec<u64>)]) -> String {
    let n = series
        .iter()
        .map(|(_, v)| v.len())
        .max()
        .unwrap_or(0)
        .max(1);
    let max = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .max()
        .unwrap_or(0)
        .max(1);
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let slot = plot_w / n as f64;
    let bar_w = (slot * 0.8 / series.len().max(1) as f64).max(0.5);
    let y = |v: u64| TOP + plot_h * (1.0 - v as f64 / max as f64);
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="20" text-anchor="middle" font-size="15">Uploaded bytes per checkpoint</text>"#,
        WIDTH / 2.0
    );
    for tick in 0..=4u64 {
        let v = max * tick / 4;
        let ty = y(v);
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{ty:.1}" x2="{:.1}" y2="{ty:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            WIDTH - RIGHT,
            LEFT - 6.0,
            ty + 4.0,
            human_bytes(v)
        );
    }
    for (s, (_, values)) in series.iter().enumerate() {
        let color = COLORS[s % COLORS.len()];
        for (i, &v) in values.iter().enumerate() {
            let x = LEFT + slot * i as f64 + slot * 0.1 + bar_w * s as f64;
            let top = y(v);
            let _ = writeln!(
                svg,
                r#"<rect x="{x:.2}" y="{top:.2}" width="{bar_w:.2}" height="{:.2}" fill="{color}"><title>checkpoint {} {}: {}</title></rect>"#,
                TOP + plot_h - top,
                i + 1,
                series[s].0,
                human_bytes(v)
            );
        }
    }
    let step = n.div_ceil(20).max(1);
    for i in (0..n).step_by(step) {
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + slot * (i as f64 + 0.5),
            TOP + plot_h + 16.0,
            i + 1
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">checkpoint</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 10.0
    );
    for (s, (name, _)) in series.iter().enumerate() {
        let lx = LEFT + 10.0 + 130.0 * s as f64;
        let _ = writeln!(
            svg,
            r#"<rect x="{lx:.1}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            TOP - 4.0,
            COLORS[s % COLORS.len()],
            lx + 16.0,
            TOP + 6.0,
            name
        );
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_scale_to_the_largest_value() {
        let svg =
            uploaded_per_checkpoint(&[("incremental", vec![1000, 10]), ("full", vec![1000, 1000])]);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(
            svg.matches("<rect x=").count(),
            4 + 2,
            "4 bars and 2 legend boxes"
        );
        let full_h = format!(r#"height="{:.2}""#, HEIGHT - TOP - BOTTOM);
        assert_eq!(
            svg.matches(&full_h).count(),
            3,
            "the three 1000-byte bars are full height"
        );
        assert!(svg.contains("checkpoint 2 incremental: 10 B"));
    }
}
