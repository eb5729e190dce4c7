//! The figures of one run: a table for the terminal and `bench/REPORT.md`.

use std::fmt::Write as _;

/// One figure.
#[derive(Debug, Clone)]
pub struct Row {
    /// Report item, e.g. `1c`.
    pub item: String,
    pub metric: String,
    pub value: String,
    /// The goal, or empty when the figure is context.
    pub goal: String,
    /// `met`, `missed by ...`, or empty.
    pub verdict: String,
}

/// Everything measured, with the notes that say how.
#[derive(Debug, Default)]
pub struct Results {
    pub rows: Vec<Row>,
    /// (item, note): how a figure was obtained, what was substituted, what failed.
    pub notes: Vec<(String, String)>,
}

impl Results {
    /// A figure without a goal.
    pub fn figure(&mut self, item: &str, metric: &str, value: String) {
        self.rows.push(Row {
            item: item.to_owned(),
            metric: metric.to_owned(),
            value,
            goal: String::new(),
            verdict: String::new(),
        });
    }

    /// A figure with a goal and its verdict.
    pub fn goal(&mut self, item: &str, metric: &str, value: String, goal: &str, verdict: String) {
        self.rows.push(Row {
            item: item.to_owned(),
            metric: metric.to_owned(),
            value,
            goal: goal.to_owned(),
            verdict,
        });
    }

    pub fn note(&mut self, item: &str, note: impl Into<String>) {
        self.notes.push((item.to_owned(), note.into()));
    }

    /// The table, plain text, aligned.
    pub fn table(&self) -> String {
        let header = ["item", "metric", "value", "goal", "verdict"];
        let cells: Vec<[&str; 5]> = self
            .rows
            .iter()
            .map(|r| {
                [
                    r.item.as_str(),
                    r.metric.as_str(),
                    r.value.as_str(),
                    r.goal.as_str(),
                    r.verdict.as_str(),
                ]
            })
            .collect();
        let mut widths = header.map(str::len);
        for row in &cells {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |row: [&str; 5]| {
            let mut s = String::new();
            for (i, (c, w)) in row.iter().zip(widths).enumerate() {
                if i > 0 {
                    s.push_str(" | ");
                }
                let _ = write!(s, "{c:<w$}");
            }
            s.trim_end().to_owned()
        };
        let mut out = line(header);
        out.push('\n');
        out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 3 * (widths.len() - 1)));
        out.push('\n');
        for row in cells {
            out.push_str(&line(row));
            out.push('\n');
        }
        out
    }
}

/// `met` when `value <= goal`, else by how much it is over.
pub fn at_most(value: f64, goal: f64) -> String {
    if value <= goal {
        "met".to_owned()
    } else {
        format!(
            "missed: {:.2}x the goal ({:+.0}%)",
            value / goal,
            (value / goal - 1.0) * 100.0
        )
    }
}

/// `met` when `value >= goal`, else by how much it is short.
pub fn at_least(value: f64, goal: f64) -> String {
    if value >= goal {
        "met".to_owned()
    } else {
        format!(
            "missed: {:.0}% of the goal ({:.0}% short)",
            value / goal * 100.0,
            (1.0 - value / goal) * 100.0
        )
    }
}
