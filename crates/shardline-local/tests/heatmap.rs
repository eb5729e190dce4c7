//! `heatmap`: CSV in, PNG out with the expected size, over-limit cells red.

use std::process::Command;

use shardline_local::heatmap::{
    EMPTY, HeatRow, MAX_COLUMNS, OVER_LIMIT, cell_colour, grid, layout, render_png, render_rgb,
};

/// 3 keys over 60 seconds; `hot` passes 1,000 WCU/s in seconds 20..30.
fn csv() -> String {
    let mut s = String::from("second,table,pk,wcu,throttled_items\n");
    for second in 1000..1060 {
        let hot = if (1020..1030).contains(&second) {
            1500
        } else {
            800
        };
        s.push_str(&format!("{second},readings,hot,{hot},0\n"));
        s.push_str(&format!("{second},readings,\"s01#2026-06-22T10\",200,0\n"));
        if second % 2 == 0 {
            s.push_str(&format!("{second},readings,\"a,\"\"quoted\"\"\",50.5,0\n"));
        }
    }
    s
}

/// Width and height from a PNG's IHDR chunk.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    assert_eq!(&bytes[12..16], b"IHDR");
    let be =
        |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    (be(16), be(20))
}

#[test]
fn csv_rows_with_header_and_quotes() {
    let rows = HeatRow::parse_csv(&csv()).expect("parses");
    assert_eq!(rows.len(), 60 + 60 + 30);
    assert_eq!(
        rows[2],
        HeatRow {
            second: 1000,
            table: "readings".into(),
            pk: "a,\"quoted\"".into(),
            wcu: 50.5,
            throttled_items: 0,
        }
    );
    let err = HeatRow::parse_csv("1,t,k,x,0\n").expect_err("bad wcu");
    assert!(format!("{err:#}").contains("line 1"), "{err:#}");
    assert!(HeatRow::parse_csv("1,t,k,1\n").is_err());
    assert!(HeatRow::parse_csv("1,t,\"k,1,0\n").is_err());
}

/// Rows show the partition key; with rows of several tables (the demo's readings and
/// shard tables), the key and its table's number, the tables named in order.
#[test]
fn labels_are_partition_keys_and_tables_are_numbered() {
    let rows = HeatRow::parse_csv(
        "second,table,pk,wcu,throttled_items\n\
         1,demo-1-sharded-ShardsTable,device#hot,5,0\n\
         1,demo-1-sharded-ReadingsTable,3.4#2026-06-22T10,900,0\n",
    )
    .expect("parses");
    let g = grid(&rows, 10).expect("grid");
    assert_eq!(
        g.tables,
        ["demo-1-sharded-ReadingsTable", "demo-1-sharded-ShardsTable"]
    );
    assert_eq!(g.keys, ["3.4#2026-06-22T10 [1]", "device#hot [2]"]);
    let one = grid(&rows[1..], 10).expect("grid");
    assert_eq!(one.keys, ["3.4#2026-06-22T10"]);
}

#[test]
fn rows_are_the_top_keys_by_total_wcu() {
    let rows = HeatRow::parse_csv(&csv()).expect("parses");
    let g = grid(&rows, 2).expect("grid");
    assert_eq!(g.keys, ["hot", "s01#2026-06-22T10"]);
    assert_eq!(g.columns(), 60);
    assert_eq!(g.bin, 1);
    assert_eq!(g.first_second, 1000);
    assert_eq!(g.cells[0][20], (1500.0, 0));
    assert_eq!(g.cells[0][19], (800.0, 0));
    assert!(grid(&[], 5).is_err());
}

#[test]
fn long_runs_are_binned_by_their_busiest_second() {
    let rows: Vec<HeatRow> = (0..3000)
        .map(|s| HeatRow {
            second: s,
            table: "t".into(),
            pk: "k".into(),
            wcu: if s == 1234 { 2000.0 } else { 10.0 },
            throttled_items: 0,
        })
        .collect();
    let g = grid(&rows, 40).expect("grid");
    assert_eq!(g.bin, 3);
    assert_eq!(g.columns(), 1000);
    assert!(g.columns() <= MAX_COLUMNS);
    assert_eq!(g.cells[0][1234 / 3], (2000.0, 0));
    assert_eq!(g.cells[0][0], (10.0, 0));
}

#[test]
fn colours_follow_the_limit() {
    assert_eq!(cell_colour(0.0, 0, 1000.0), EMPTY);
    assert_eq!(cell_colour(1000.1, 0, 1000.0), OVER_LIMIT);
    assert_eq!(cell_colour(10.0, 3, 1000.0), OVER_LIMIT, "throttled is red");
    let low = cell_colour(100.0, 0, 1000.0);
    let high = cell_colour(1000.0, 0, 1000.0);
    assert!(low != OVER_LIMIT && high != OVER_LIMIT && low != high);
    assert!(high.2 < low.2, "hotter is less blue");
}

#[test]
fn png_has_the_layout_size_and_red_cells_where_over() {
    let rows = HeatRow::parse_csv(&csv()).expect("parses");
    let g = grid(&rows, 40).expect("grid");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("heat.png");
    let l = render_png(&g, 1000.0, &path).expect("renders");
    assert_eq!(l, layout(3, 60));
    assert_eq!((l.cell_w, l.cell_h), (20, 24));
    assert_eq!((l.width, l.height), (300 + 60 * 20 + 130, 40 + 3 * 24 + 44));
    let bytes = std::fs::read(&path).expect("written");
    assert_eq!(png_size(&bytes), (l.width, l.height));

    let (pixels, l) = render_rgb(&g, 1000.0).expect("renders");
    let at = |row: u32, column: u32| {
        let x = l.left + column * l.cell_w + l.cell_w / 2;
        let y = l.top + row * l.cell_h + l.cell_h / 2;
        let i = ((y * l.width + x) * 3) as usize;
        (pixels[i], pixels[i + 1], pixels[i + 2])
    };
    let red = (OVER_LIMIT.0, OVER_LIMIT.1, OVER_LIMIT.2);
    for c in 20..30 {
        assert_eq!(at(0, c), red, "hot key at second {c}");
    }
    assert_ne!(at(0, 19), red);
    assert_ne!(at(1, 25), red);
    // The quoted key writes every other second: odd seconds are empty.
    assert_eq!(at(2, 1), (255, 255, 255));
    assert_ne!(at(2, 2), (255, 255, 255));
}

/// Each row's label is drawn with the bundled font: the left margin beside every row
/// holds dark pixels, with no system font library involved.
#[test]
fn row_labels_are_drawn_with_the_bundled_font() {
    let rows = HeatRow::parse_csv(&csv()).expect("parses");
    let g = grid(&rows, 40).expect("grid");
    let (pixels, l) = render_rgb(&g, 1000.0).expect("renders");
    for row in 0..g.keys.len() as u32 {
        let dark = (l.top + row * l.cell_h..l.top + (row + 1) * l.cell_h)
            .flat_map(|y| (0..l.left).map(move |x| ((y * l.width + x) * 3) as usize))
            .filter(|&i| pixels[i] < 128 && pixels[i + 1] < 128 && pixels[i + 2] < 128)
            .count();
        assert!(dark > 20, "row {row}'s label has {dark} dark pixels");
    }
}

#[test]
fn the_binary_writes_the_png() {
    let dir = tempfile::tempdir().expect("tempdir");
    let csv_path = dir.path().join("heat.csv");
    let png = dir.path().join("heat.png");
    std::fs::write(&csv_path, csv()).expect("write csv");
    let out = Command::new(env!("CARGO_BIN_EXE_shardline-local"))
        .args(["heatmap", "--top", "2", "--csv"])
        .arg(&csv_path)
        .arg("--out")
        .arg(&png)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let l = layout(2, 60);
    assert_eq!(
        png_size(&std::fs::read(&png).expect("written")),
        (l.width, l.height)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("2 keys x 60 columns of 1 s, 10 cells over 1000 WCU/s"),
        "{text}"
    );
}
