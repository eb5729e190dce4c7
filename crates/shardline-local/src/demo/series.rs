//! The dashboard's series picture: one device's metric at one-minute rollups (the
//! minute's average as a line, its min-max as a band) over the raw readings as points,
//! drawn with plotters in the heatmap's bundled font.

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

use crate::heatmap::{FONT_NAME, register_font};

/// One minute's rollup of the metric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MinuteBand {
    /// The minute's start, epoch ms.
    pub minute_ms: i64,
    pub avg: f64,
    pub min: f64,
    pub max: f64,
}

const WIDTH: u32 = 1200;
const HEIGHT: u32 = 600;
const MINUTE_MS: i64 = store::rollup::MINUTE_MS;
/// The band's, the points' and the average's colours.
const BAND: RGBColor = RGBColor(120, 170, 230);
const POINT: RGBColor = RGBColor(90, 90, 90);
const AVG: RGBColor = RGBColor(210, 40, 30);

/// Draws `device`'s `metric`: `bands` (minute rollups) over `points` (time in epoch ms,
/// value), to the PNG at `path`.
pub fn render_png(
    path: &Path,
    device: &str,
    metric: &str,
    bands: &[MinuteBand],
    points: &[(i64, f64)],
) -> anyhow::Result<()> {
    register_font()?;
    let area = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    draw(&area, device, metric, bands, points)
        .map_err(|e| anyhow!("cannot draw the series: {e}"))?;
    area.present()
        .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
    Ok(())
}

/// The span drawn, in epoch ms: whole minutes around every band and point (a minute
/// when there is nothing).
fn x_span(bands: &[MinuteBand], points: &[(i64, f64)]) -> (i64, i64) {
    let times = bands
        .iter()
        .flat_map(|b| [b.minute_ms, b.minute_ms + MINUTE_MS - 1])
        .chain(points.iter().map(|p| p.0));
    let (lo, hi) = times.fold((i64::MAX, i64::MIN), |(lo, hi), t| (lo.min(t), hi.max(t)));
    if lo > hi {
        return (0, MINUTE_MS);
    }
    let lo = lo - lo.rem_euclid(MINUTE_MS);
    let hi = hi - hi.rem_euclid(MINUTE_MS) + MINUTE_MS;
    (lo, hi)
}

/// The values drawn, padded by a twentieth (a unit when flat or empty).
fn y_span(bands: &[MinuteBand], points: &[(i64, f64)]) -> (f64, f64) {
    let values = bands
        .iter()
        .flat_map(|b| [b.min, b.max, b.avg])
        .chain(points.iter().map(|p| p.1))
        .filter(|v| v.is_finite());
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if lo > hi {
        return (0.0, 1.0);
    }
    let pad = ((hi - lo) / 20.0).max(0.5);
    (lo - pad, hi + pad)
}

/// `ms` as `HH:MM:SS` UTC.
fn clock(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map_or_else(|| ms.to_string(), |t| t.format("%H:%M:%S").to_string())
}

fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    device: &str,
    metric: &str,
    bands: &[MinuteBand],
    points: &[(i64, f64)],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    area.fill(&WHITE)?;
    let font = |size: u32| (FONT_NAME, size).into_font();
    let (x0, x1) = x_span(bands, points);
    let (y0, y1) = y_span(bands, points);
    // Seconds from the first minute drawn.
    let x = |ms: i64| (ms - x0) as f64 / 1000.0;
    let date = chrono::DateTime::from_timestamp_millis(x0)
        .map_or_else(String::new, |t| t.format("%Y-%m-%d").to_string());
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "{device}: {metric}, one-minute rollups (sealed device-hours) over its {} raw readings",
                points.len()
            ),
            font(16),
        )
        .margin(14)
        .margin_right(40)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..x(x1), y0..y1)?;
    let x_label = |s: &f64| clock(x0 + (*s * 1000.0).round() as i64);
    chart
        .configure_mesh()
        .label_style(font(12))
        .axis_desc_style(font(13))
        .x_desc(format!("{date} UTC"))
        .y_desc(metric)
        .x_labels(12)
        .x_label_formatter(&x_label)
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    let minute_secs = MINUTE_MS as f64 / 1000.0;
    chart.draw_series(bands.iter().map(|b| {
        let left = x(b.minute_ms);
        Rectangle::new(
            [(left, b.max), (left + minute_secs, b.min)],
            BAND.mix(0.35).filled(),
        )
    }))?;
    // Each minute's edges, so that neighbouring minutes read as cells of their own.
    chart
        .draw_series(bands.iter().map(|b| {
            let left = x(b.minute_ms);
            Rectangle::new(
                [(left, b.max), (left + minute_secs, b.min)],
                BAND.stroke_width(1),
            )
        }))?
        .label("min-max of each minute")
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 18, y + 5)], BAND.mix(0.35).filled()));
    chart
        .draw_series(
            points
                .iter()
                .map(|&(t, v)| Circle::new((x(t), v), 1, POINT.mix(0.35).filled())),
        )?
        .label("raw readings")
        .legend(|(x, y)| Circle::new((x + 9, y), 2, POINT.filled()));
    chart
        .draw_series(bands.iter().map(|b| {
            let left = x(b.minute_ms);
            PathElement::new(
                vec![(left, b.avg), (left + minute_secs, b.avg)],
                AVG.stroke_width(3),
            )
        }))?
        .label("average of each minute")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], AVG.stroke_width(3)));
    chart
        .configure_series_labels()
        .label_font(font(12))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_span_is_whole_minutes_around_bands_and_points() {
        let band = MinuteBand {
            minute_ms: 120_000,
            avg: 1.0,
            min: -2.0,
            max: 3.0,
        };
        assert_eq!(x_span(&[band], &[(185_000, 9.0)]), (120_000, 240_000));
        assert_eq!(x_span(&[], &[]), (0, 60_000));
        let (lo, hi) = y_span(&[band], &[(185_000, 9.0)]);
        assert!(lo < -2.0 && hi > 9.0, "{lo} {hi}");
    }

    #[test]
    fn a_series_draws_to_a_png() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("series.png");
        let bands: Vec<MinuteBand> = (0..3)
            .map(|m| MinuteBand {
                minute_ms: 1_750_000_020_000 + m * MINUTE_MS,
                avg: 15.0,
                min: -10.0,
                max: 40.0,
            })
            .collect();
        let points: Vec<(i64, f64)> = (0..500)
            .map(|i| (1_750_000_020_000 + i * 300, f64::from(i as i32 % 50) - 10.0))
            .collect();
        render_png(&path, "sensor-alpha-001", "temp_c", &bands, &points).unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() > 1000);
    }
}
