//! An SVG of a report: the detection-latency CDF and bandwidth over time.
//!
//! Only plotters' SVG backend is used (no system font libraries): text is
//! laid out with plotters' built-in metrics and drawn by the SVG viewer.

use std::path::Path;

use plotters::prelude::*;

use crate::report::{FaultReport, Report};

/// Drawing failed (usually: the file could not be written).
#[derive(Debug, thiserror::Error)]
#[error("cannot draw {path}: {message}")]
pub struct PlotError {
    /// The file.
    pub path: String,
    /// What went wrong.
    pub message: String,
}

/// Points of the empirical CDF of `v`.
fn cdf(mut v: Vec<f64>) -> Vec<(f64, f64)> {
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    v.iter()
        .enumerate()
        .map(|(i, x)| (*x, (i + 1) as f64 / n))
        .collect()
}

/// The SVG document for `report`.
pub fn render_svg(report: &Report) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 900)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let (top, bottom) = root.split_vertically(450);
        draw_cdf(&top, report)?;
        draw_bandwidth(&bottom, report)?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// Writes the SVG of `report` to `path`.
pub fn write_svg(report: &Report, path: &Path) -> Result<(), PlotError> {
    let err = |message: String| PlotError {
        path: path.display().to_string(),
        message,
    };
    let svg = render_svg(report).map_err(err)?;
    std::fs::write(path, svg).map_err(|e| err(e.to_string()))
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn draw_cdf(area: &Area<'_>, report: &Report) -> Result<(), String> {
    let faults = || report.runs.iter().flat_map(|r| r.faults.iter());
    type Latency = fn(&FaultReport) -> Option<f64>;
    let series: [(&str, Latency, RGBColor); 3] = [
        ("first observer", |f| f.first_secs, GREEN),
        ("median observer", |f| f.median_secs, BLUE),
        ("all observers", |f| f.all_secs, RED),
    ];
    let series = series.map(|(name, latency, color)| {
        let values: Vec<f64> = faults().filter_map(latency).collect();
        (name, values, color)
    });
    let xmax = series
        .iter()
        .flat_map(|s| s.1.iter().copied())
        .fold(1.0f64, f64::max)
        * 1.05;
    let title = format!(
        "{}: detection latency CDF ({} faults)",
        report.scenario,
        faults().count()
    );
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..xmax, 0.0..1.0)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("seconds after injection")
        .y_desc("share of faults")
        .draw()
        .map_err(|e| e.to_string())?;
    for (name, values, color) in series {
        if values.is_empty() {
            continue;
        }
        let mut pts = vec![(0.0, 0.0)];
        for (x, y) in cdf(values) {
            let prev = pts.last().map_or(0.0, |p: &(f64, f64)| p.1);
            pts.push((x, prev));
            pts.push((x, y));
        }
        chart
            .draw_series(LineSeries::new(pts, color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}

fn draw_bandwidth(area: &Area<'_>, report: &Report) -> Result<(), String> {
    let runs: Vec<_> = report.runs.iter().take(5).collect();
    let hours = runs
        .iter()
        .flat_map(|r| r.samples.last())
        .map(|s| s.0)
        .fold(0.0f64, f64::max)
        > 3.0 * 3600.0;
    let (scale, unit) = if hours {
        (3600.0, "hours")
    } else {
        (60.0, "minutes")
    };
    let xmax = runs
        .iter()
        .map(|r| r.virtual_secs / scale)
        .fold(1e-3f64, f64::max);
    let ymax = runs
        .iter()
        .flat_map(|r| r.samples.iter().map(|s| s.1))
        .fold(1.0f64, f64::max)
        * 1.1;
    let every = runs
        .first()
        .and_then(|r| r.samples.get(..2))
        .filter(|s| s.len() == 2)
        .map_or(10.0, |s| s[1].0 - s[0].0);
    let caption = format!("protocol bytes per node per second ({every:.0} s samples)");
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..xmax, 0.0..ymax)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(unit)
        .y_desc("bytes/s")
        .draw()
        .map_err(|e| e.to_string())?;
    for (k, r) in runs.iter().enumerate() {
        let color = Palette99::pick(k).to_rgba();
        chart
            .draw_series(LineSeries::new(
                r.samples.iter().map(|s| (s.0 / scale, s.1)),
                color.stroke_width(1),
            ))
            .map_err(|e| e.to_string())?
            .label(format!("seed {}", r.seed))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}
