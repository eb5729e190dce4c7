//! `bench/REPORT.md` as one report: a header naming the run that wrote it last (its
//! command, commit, date and machine), then the table, each row naming the run it came
//! from, then how each figure was obtained; the runs' own stories go to
//! `bench/HISTORY.md`.
//!
//! A run of some items (`cargo xtask bench --only 5`) replaces the rows and notes of
//! those items and keeps every other row as it was, now labelled with the run it came
//! from (the commit and date of the report's header before). Sections after the notes
//! (tables written by tests, per-item analyses) are kept as they are.

use std::fmt::Write as _;

use crate::report::{Results, Row};

/// What a row says of the run it came from, when that is the run that wrote the report.
pub const THIS_RUN: &str = "this run";

/// The heading of the figures' table.
const FIGURES: &str = "## Figures";
/// The heading of the notes.
const NOTES: &str = "## How each figure was obtained";

/// The run that writes the report.
#[derive(Debug, Clone)]
pub struct Run {
    /// The command line, e.g. `cargo xtask bench --only 5`.
    pub command: String,
    /// The commit measured, e.g. `ad5504f`, with ` (and uncommitted changes)` if any.
    pub commit: String,
    pub date: String,
    pub machine: String,
    /// `full`, or which items.
    pub mode: String,
}

impl Run {
    fn header(&self) -> String {
        format!(
            "# Shardline benchmarks\n\n\
             The figures of `cargo xtask bench`. Ratios are measured in the same run on the \
             same machine; absolute times are context.\n\n\
             - Command: `{}`\n- Commit: {}\n- Date: {}\n- Machine: {}\n- Mode: {}\n\
             - Release build (`--release`), the capacity-proxy in process on loopback.\n\n\
             A row's `run` says where its figure came from: `{THIS_RUN}` (the run above), or \
             an earlier run's commit and date. Every run, with what it found beside the \
             figures, is in `bench/HISTORY.md`.\n",
            self.command, self.commit, self.date, self.machine, self.mode
        )
    }

    /// The entry `bench/HISTORY.md` gains for this run.
    pub fn history_entry(&self) -> String {
        format!(
            "\n## {}: `{}` at {}\n\n- Machine: {}\n- Mode: {}\n",
            self.date, self.command, self.commit, self.machine, self.mode
        )
    }
}

/// What an earlier report holds.
#[derive(Debug, Default)]
pub struct Earlier {
    /// The label of the run that wrote it (`commit, date`), if its header names one.
    pub run: Option<String>,
    /// Its rows, each with the run it came from.
    pub rows: Vec<(Row, String)>,
    /// Its notes, (item, note).
    pub notes: Vec<(String, String)>,
    /// Everything after the notes, kept as it is.
    pub tail: String,
}

/// The item number a row or note belongs to: `1c'` and `1a` are item 1's.
pub fn item_number(item: &str) -> Option<u8> {
    let digits: String = item.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn header_field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines()
        .take_while(|l| *l != FIGURES)
        .find_map(|l| l.strip_prefix(&format!("- {name}: ")))
}

/// Reads a report this module wrote.
pub fn parse(text: &str) -> Earlier {
    let run = header_field(text, "Commit")
        .zip(header_field(text, "Date"))
        .map(|(commit, date)| format!("{commit}, {date}"));
    let mut earlier = Earlier {
        run,
        ..Earlier::default()
    };
    let mut lines = text.lines().skip_while(|l| *l != FIGURES).peekable();
    // The table: its header and rule, then a row a line.
    for line in lines.by_ref() {
        if line == NOTES {
            break;
        }
        let Some(cells) = row_cells(line) else {
            continue;
        };
        if cells.len() < 5 || cells[0] == "item" || cells[0].starts_with("---") {
            continue;
        }
        let run = cells.get(5).cloned().unwrap_or_default();
        let mut cells = cells.into_iter();
        let mut next = || cells.next().unwrap_or_default();
        let row = Row {
            item: next(),
            metric: next(),
            value: next(),
            goal: next(),
            verdict: next(),
        };
        earlier.rows.push((row, run));
    }
    while let Some(line) = lines.next_if(|l| !l.starts_with("## ")) {
        if let Some((item, note)) = line
            .strip_prefix("- **")
            .and_then(|rest| rest.split_once("**: "))
        {
            earlier.notes.push((item.to_owned(), note.to_owned()));
        }
    }
    for line in lines {
        earlier.tail.push_str(line);
        earlier.tail.push('\n');
    }
    earlier
}

/// A table row's cells, `\|` kept as `|` inside a cell.
fn row_cells(line: &str) -> Option<Vec<String>> {
    let inner = line.strip_prefix('|')?.strip_suffix('|')?;
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cell.push('|');
                chars.next();
            }
            '|' => cells.push(std::mem::take(&mut cell).trim().to_owned()),
            c => cell.push(c),
        }
    }
    cells.push(cell.trim().to_owned());
    Some(cells)
}

/// The report after `run` measured `items` (every item when empty) into `results`.
pub fn splice(earlier: &Earlier, run: &Run, items: &[u8], results: &Results) -> String {
    let rerun =
        |item: &str| items.is_empty() || item_number(item).is_some_and(|n| items.contains(&n));
    let earlier_run = earlier.run.as_deref().unwrap_or("an earlier run");
    let mut rows: Vec<(&Row, String)> = earlier
        .rows
        .iter()
        .filter(|(row, _)| !rerun(&row.item))
        .map(|(row, from)| {
            let from = if from.is_empty() || from == THIS_RUN {
                earlier_run.to_owned()
            } else {
                from.clone()
            };
            (row, from)
        })
        .collect();
    rows.extend(results.rows.iter().map(|row| (row, THIS_RUN.to_owned())));
    rows.sort_by_key(|(row, _)| item_number(&row.item));
    let mut notes: Vec<(&str, &str)> = earlier
        .notes
        .iter()
        .filter(|(item, _)| !rerun(item))
        .map(|(i, n)| (i.as_str(), n.as_str()))
        .collect();
    notes.extend(results.notes.iter().map(|(i, n)| (i.as_str(), n.as_str())));
    notes.sort_by_key(|(item, _)| item_number(item));

    let mut md = run.header();
    let _ = write!(
        md,
        "\n{FIGURES}\n\n| item | metric | value | goal | verdict | run |\n|---|---|---|---|---|---|\n"
    );
    for (r, from) in rows {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {from} |",
            r.item,
            r.metric.replace('|', "\\|"),
            r.value.replace('|', "\\|"),
            r.goal,
            r.verdict
        );
    }
    let _ = write!(md, "\n{NOTES}\n\n");
    for (item, note) in notes {
        let _ = writeln!(md, "- **{item}**: {note}");
    }
    if !earlier.tail.is_empty() {
        md.push('\n');
        md.push_str(&earlier.tail);
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(commit: &str, date: &str) -> Run {
        Run {
            command: "cargo xtask bench --only 5".to_owned(),
            commit: commit.to_owned(),
            date: date.to_owned(),
            machine: "2 cores".to_owned(),
            mode: "full, items 5 only".to_owned(),
        }
    }

    fn results(rows: &[(&str, &str)]) -> Results {
        let mut results = Results::default();
        for (item, value) in rows {
            results.figure(item, "metric | with a bar", (*value).to_owned());
            results.note(item, format!("how {item} was measured"));
        }
        results
    }

    #[test]
    fn a_partial_run_replaces_its_items_rows_and_labels_the_others_with_their_run() {
        let first = splice(
            &Earlier::default(),
            &run("aaaaaaa", "2026-11-01 10:00 UTC"),
            &[],
            &results(&[("1", "one"), ("1c'", "one c"), ("5", "five")]),
        );
        let mut report = first;
        report.push_str("\n## A section of its own\n\nkept as it is\n");
        let second = splice(
            &parse(&report),
            &run("bbbbbbb", "2026-11-02 10:00 UTC"),
            &[5],
            &results(&[("5", "five again")]),
        );
        let again = parse(&second);
        assert_eq!(again.run.as_deref(), Some("bbbbbbb, 2026-11-02 10:00 UTC"));
        let rows: Vec<(&str, &str, &str, &str)> = again
            .rows
            .iter()
            .map(|(r, from)| {
                (
                    r.item.as_str(),
                    r.metric.as_str(),
                    r.value.as_str(),
                    from.as_str(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                (
                    "1",
                    "metric | with a bar",
                    "one",
                    "aaaaaaa, 2026-11-01 10:00 UTC"
                ),
                (
                    "1c'",
                    "metric | with a bar",
                    "one c",
                    "aaaaaaa, 2026-11-01 10:00 UTC"
                ),
                ("5", "metric | with a bar", "five again", THIS_RUN),
            ]
        );
        let notes: Vec<&str> = again.notes.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(
            notes,
            [
                "how 1 was measured",
                "how 1c' was measured",
                "how 5 was measured"
            ]
        );
        assert_eq!(again.tail, "## A section of its own\n\nkept as it is\n");
        // A third run keeps the first run's label on rows it did not measure.
        let third = parse(&splice(
            &again,
            &run("ccccccc", "2026-11-03 10:00 UTC"),
            &[1],
            &results(&[("1", "one again")]),
        ));
        let froms: Vec<(&str, &str)> = third
            .rows
            .iter()
            .map(|(r, from)| (r.item.as_str(), from.as_str()))
            .collect();
        assert_eq!(
            froms,
            [("1", THIS_RUN), ("5", "bbbbbbb, 2026-11-02 10:00 UTC")]
        );
    }

    #[test]
    fn the_committed_report_reads_back_whole_each_row_naming_its_run() {
        let text = include_str!("../../../bench/REPORT.md");
        let earlier = parse(text);
        let table_lines = text
            .lines()
            .skip_while(|l| *l != FIGURES)
            .take_while(|l| *l != NOTES)
            .filter(|l| l.starts_with("| ") && !l.starts_with("| item |"))
            .count();
        assert!(table_lines > 100, "{table_lines} rows");
        assert_eq!(earlier.rows.len(), table_lines);
        for (row, from) in &earlier.rows {
            assert!(item_number(&row.item).is_some(), "{row:?}");
            assert!(!from.is_empty(), "{row:?} names no run");
        }
        assert!(earlier.run.is_some(), "the header names no commit and date");
        assert!(!earlier.notes.is_empty());
        assert!(earlier.tail.starts_with("## "), "{}", &earlier.tail[..40]);
        // Measuring nothing again leaves every row and note where it was.
        let again = parse(&splice(
            &earlier,
            &run("x", "y"),
            &[99],
            &Results::default(),
        ));
        assert_eq!(again.rows.len(), earlier.rows.len());
        let mut notes = earlier.notes.clone();
        notes.sort_by_key(|(item, _)| item_number(item));
        assert_eq!(again.notes, notes);
        assert_eq!(again.tail, earlier.tail);
    }

    #[test]
    fn items_are_numbered_by_their_leading_digits() {
        assert_eq!(item_number("1c'"), Some(1));
        assert_eq!(item_number("10"), Some(10));
        assert_eq!(item_number("route"), None);
    }
}
