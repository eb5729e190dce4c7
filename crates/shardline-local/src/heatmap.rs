//! `shardline-local heatmap`: per-key WCU over time from `capacity-proxy --heat-csv`
//! (`second,table,pk,wcu,throttled_items`), as a PNG.
//!
//! Rows are the top keys by total WCU, columns seconds (or bins of seconds, taking
//! the busiest second of each bin, when there are more than [`MAX_COLUMNS`]). A cell's
//! colour is its WCU relative to the partition limit; a cell over the limit, or with
//! throttled items, is red.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context as _, anyhow, bail};
use clap::Args;
use plotters::coord::Shift;
use plotters::prelude::*;

/// Most columns drawn; longer runs are binned.
pub const MAX_COLUMNS: usize = 1200;
/// The colour of an over-limit (or throttled) cell.
pub const OVER_LIMIT: RGBColor = RGBColor(220, 20, 20);
/// The colour of a cell without writes.
pub const EMPTY: RGBColor = RGBColor(255, 255, 255);

/// One row of the heat CSV, written and read by `capacity_proxy` (the one copy of
/// its format).
pub use capacity_proxy::HeatRow;

/// The cells to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct Grid {
    /// The tables of the rows, named in the title (numbered from 1 when several).
    pub tables: Vec<String>,
    /// Row labels, hottest first: the partition key, and `[n]`, the table's number,
    /// when there are several tables.
    pub keys: Vec<String>,
    /// Total WCU per row.
    pub totals: Vec<f64>,
    /// The first second.
    pub first_second: u64,
    /// Seconds per column.
    pub bin: u64,
    /// `cells[row][column]`: the busiest second's WCU in the column, and throttled items.
    pub cells: Vec<Vec<(f64, u64)>>,
}

impl Grid {
    /// Columns.
    pub fn columns(&self) -> usize {
        self.cells.first().map_or(0, Vec::len)
    }
}

/// The top `top` keys by total WCU over the seconds of `rows`.
pub fn grid(rows: &[HeatRow], top: usize) -> anyhow::Result<Grid> {
    if rows.is_empty() {
        bail!("the heat CSV has no rows");
    }
    let tables: Vec<String> = rows
        .iter()
        .map(|r| r.table.as_str())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(str::to_owned)
        .collect();
    // A row is its partition key; with several tables, also the table's number in the
    // title ([`Grid::tables`]).
    let label = |r: &HeatRow| match tables.iter().position(|t| *t == r.table) {
        Some(i) if tables.len() > 1 => format!("{} [{}]", r.pk, i + 1),
        _ => r.pk.clone(),
    };
    let first = rows.iter().map(|r| r.second).min().unwrap_or(0);
    let last = rows.iter().map(|r| r.second).max().unwrap_or(0);
    let seconds = last - first + 1;
    let bin = seconds.div_ceil(MAX_COLUMNS as u64).max(1);
    let columns = usize::try_from(seconds.div_ceil(bin)).context("too many columns")?;

    let mut totals: HashMap<String, f64> = HashMap::new();
    for r in rows {
        *totals.entry(label(r)).or_default() += r.wcu;
    }
    let mut ranked: Vec<(String, f64)> = totals.into_iter().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    ranked.truncate(top.max(1));
    let index: BTreeMap<&str, usize> = ranked
        .iter()
        .enumerate()
        .map(|(i, (k, _))| (k.as_str(), i))
        .collect();

    // Several rows may share (key, second), e.g. after a proxy restart: sum them first.
    let mut per_second: HashMap<(usize, u64), (f64, u64)> = HashMap::new();
    for r in rows {
        if let Some(&row) = index.get(label(r).as_str()) {
            let cell = per_second.entry((row, r.second)).or_default();
            cell.0 += r.wcu;
            cell.1 += r.throttled_items;
        }
    }
    let mut cells = vec![vec![(0.0_f64, 0_u64); columns]; ranked.len()];
    for ((row, second), (wcu, throttled)) in per_second {
        let column = usize::try_from((second - first) / bin).unwrap_or(usize::MAX);
        if let Some(cell) = cells.get_mut(row).and_then(|r| r.get_mut(column)) {
            cell.0 = cell.0.max(wcu);
            cell.1 += throttled;
        }
    }
    Ok(Grid {
        tables,
        keys: ranked.iter().map(|(k, _)| k.clone()).collect(),
        totals: ranked.iter().map(|(_, t)| *t).collect(),
        first_second: first,
        bin,
        cells,
    })
}

/// Where things go in the picture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Cell width, pixels.
    pub cell_w: u32,
    /// Cell height, pixels.
    pub cell_h: u32,
    /// Left margin (row labels).
    pub left: u32,
    /// Top margin (title).
    pub top: u32,
    /// Right margin (legend).
    pub right: u32,
    /// Bottom margin (time axis).
    pub bottom: u32,
    /// Picture width.
    pub width: u32,
    /// Picture height.
    pub height: u32,
}

/// The layout of a grid of `rows` x `columns`: cells 1-24 px wide (about 1,200 px of
/// cells), 6-24 px high (about 600 px).
pub fn layout(rows: usize, columns: usize) -> Layout {
    let fit =
        |space: usize, n: usize, lo: usize, hi: usize| (space / n.max(1)).clamp(lo, hi) as u32;
    let cell_w = fit(1200, columns, 1, 24);
    let cell_h = fit(600, rows, 6, 24);
    let (left, top, right, bottom) = (300, 40, 130, 44);
    Layout {
        cell_w,
        cell_h,
        left,
        top,
        right,
        bottom,
        width: left + cell_w * columns as u32 + right,
        height: top + cell_h * rows as u32 + bottom,
    }
}

/// A cell's colour: white without writes, pale blue to orange up to the limit, red
/// over it or when items were throttled.
pub fn cell_colour(wcu: f64, throttled: u64, limit: f64) -> RGBColor {
    if throttled > 0 || wcu > limit {
        return OVER_LIMIT;
    }
    if wcu <= 0.0 {
        return EMPTY;
    }
    let t = (wcu / limit).clamp(0.0, 1.0);
    let mix = |a: u8, b: u8| (f64::from(a) + (f64::from(b) - f64::from(a)) * t).round() as u8;
    RGBColor(mix(222, 255), mix(235, 140), mix(250, 0))
}

/// The tables as the title names them: one by its name, several numbered as the row
/// labels refer to them.
fn table_names(tables: &[String]) -> String {
    match tables {
        [one] => one.clone(),
        several => several
            .iter()
            .enumerate()
            .map(|(i, t)| format!("[{}] {t}", i + 1))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// The labels' font, bundled (DejaVu Sans Mono, `assets/fonts/LICENSE`), so that no
/// system font library is needed to draw them.
pub(crate) const FONT_NAME: &str = "dejavu-sans-mono";
static FONT_BYTES: &[u8] = include_bytes!("../assets/fonts/DejaVuSansMono.ttf");

/// Registers [`FONT_BYTES`] with plotters under [`FONT_NAME`], once per process (the
/// demo's series picture draws in it too).
pub(crate) fn register_font() -> anyhow::Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let registered = REGISTERED.get_or_init(|| {
        plotters::style::register_font(FONT_NAME, FontStyle::Normal, FONT_BYTES).is_ok()
    });
    if !*registered {
        bail!("the bundled font {FONT_NAME} could not be read");
    }
    Ok(())
}

fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    grid: &Grid,
    limit: f64,
    l: &Layout,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    area.fill(&WHITE)?;
    let x = |c: usize| (l.left + l.cell_w * c as u32) as i32;
    let y = |r: usize| (l.top + l.cell_h * r as u32) as i32;
    for (r, row) in grid.cells.iter().enumerate() {
        for (c, &(wcu, throttled)) in row.iter().enumerate() {
            let colour = cell_colour(wcu, throttled, limit);
            if colour != EMPTY {
                area.draw(&Rectangle::new(
                    [(x(c), y(r)), (x(c + 1) - 1, y(r + 1) - 1)],
                    colour.filled(),
                ))?;
            }
        }
    }
    let frame = [
        (x(0) - 1, y(0) - 1),
        (x(grid.columns()), y(grid.keys.len())),
    ];
    area.draw(&Rectangle::new(frame, BLACK.stroke_width(1)))?;
    // Legend: the colour scale from 0 to the limit, then over.
    let lx = (l.width - l.right + 20) as i32;
    let steps = 20;
    for i in 0..steps {
        let wcu = limit * f64::from(steps - i) / f64::from(steps);
        let y0 = l.top as i32 + i * 8;
        area.draw(&Rectangle::new(
            [(lx, y0), (lx + 16, y0 + 7)],
            cell_colour(wcu, 0, limit).filled(),
        ))?;
    }
    let over_y = l.top as i32 - 12;
    area.draw(&Rectangle::new(
        [(lx, over_y), (lx + 16, over_y + 9)],
        OVER_LIMIT.filled(),
    ))?;
    let font = (FONT_NAME, 12).into_font();
    let text = |s: String, at: (i32, i32)| area.draw(&Text::new(s, at, font.clone()));
    text(
        format!(
            "WCU per partition key per second of {} (top {} keys; red = over {limit:.0} WCU/s or throttled)",
            table_names(&grid.tables),
            grid.keys.len()
        ),
        (10, 8),
    )?;
    for (r, key) in grid.keys.iter().enumerate() {
        let mut label: String = key.chars().take(40).collect();
        if key.chars().count() > 40 {
            label.push('~');
        }
        text(label, (6, y(r) + (l.cell_h as i32 - 12) / 2))?;
    }
    text(format!("> {limit:.0}"), (lx + 22, over_y - 1))?;
    text(format!("{limit:.0}"), (lx + 22, l.top as i32))?;
    text("0".to_owned(), (lx + 22, l.top as i32 + steps * 8 - 10))?;
    let axis_y = y(grid.keys.len()) + 6;
    let span = grid.columns() as u64 * grid.bin;
    text(
        format!(
            "seconds from {} (+0 .. +{span}){}",
            grid.first_second,
            if grid.bin > 1 {
                format!(", {} s per column (busiest second shown)", grid.bin)
            } else {
                String::new()
            }
        ),
        (x(0), axis_y + 16),
    )?;
    let ticks = 10.min(grid.columns().max(1));
    for t in 0..=ticks {
        let c = grid.columns() * t / ticks.max(1);
        text(format!("{}", c as u64 * grid.bin), (x(c), axis_y))?;
    }
    Ok(())
}

/// Renders the grid to a PNG file; returns the layout (the picture's size).
pub fn render_png(grid: &Grid, limit: f64, path: &Path) -> anyhow::Result<Layout> {
    register_font()?;
    let l = layout(grid.keys.len(), grid.columns());
    let area = BitMapBackend::new(path, (l.width, l.height)).into_drawing_area();
    draw(&area, grid, limit, &l).map_err(|e| anyhow!("cannot draw the heatmap: {e}"))?;
    area.present()
        .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
    Ok(l)
}

/// Renders the grid to RGB pixels (row-major, 3 bytes each) with its layout.
pub fn render_rgb(grid: &Grid, limit: f64) -> anyhow::Result<(Vec<u8>, Layout)> {
    register_font()?;
    let l = layout(grid.keys.len(), grid.columns());
    let mut buffer = vec![0u8; l.width as usize * l.height as usize * 3];
    {
        let area = BitMapBackend::with_buffer(&mut buffer, (l.width, l.height)).into_drawing_area();
        draw(&area, grid, limit, &l).map_err(|e| anyhow!("cannot draw the heatmap: {e}"))?;
        area.present()
            .map_err(|e| anyhow!("cannot draw the heatmap: {e}"))?;
    }
    Ok((buffer, l))
}

/// Flags of `shardline-local heatmap`.
#[derive(Debug, Clone, Args)]
pub struct HeatmapArgs {
    /// The heat CSV of `capacity-proxy --heat-csv`.
    #[arg(long)]
    pub csv: PathBuf,
    /// The PNG to write.
    #[arg(long)]
    pub out: PathBuf,
    /// Keys (rows) to draw, by total WCU.
    #[arg(long, default_value_t = 40)]
    pub top: usize,
    /// Partition write limit, WCU/s (DynamoDB's, `sharding::capacity::PARTITION_WCU`).
    #[arg(long, default_value_t = sharding::capacity::PARTITION_WCU)]
    pub partition_wcu: f64,
}

/// The command.
pub fn run(args: &HeatmapArgs) -> anyhow::Result<()> {
    if !(args.partition_wcu.is_finite() && args.partition_wcu > 0.0) {
        bail!("--partition-wcu must be positive");
    }
    let text = std::fs::read_to_string(&args.csv)
        .with_context(|| format!("cannot read {}", args.csv.display()))?;
    let rows = HeatRow::parse_csv(&text).with_context(|| format!("{}", args.csv.display()))?;
    let grid = grid(&rows, args.top)?;
    let l = render_png(&grid, args.partition_wcu, &args.out)?;
    let over: usize = grid
        .cells
        .iter()
        .flatten()
        .filter(|(w, t)| *t > 0 || *w > args.partition_wcu)
        .count();
    println!(
        "wrote {} ({}x{} px): {} keys x {} columns of {} s, {over} cells over {:.0} WCU/s or throttled",
        args.out.display(),
        l.width,
        l.height,
        grid.keys.len(),
        grid.columns(),
        grid.bin,
        args.partition_wcu
    );
    Ok(())
}
