//! What the tables and plots of `bench fs-tree` and `bench fs-apps` share: the rows as text, the
//! notes, one bar panel.

use super::{Row, BASE};
use crate::report::plot;

/// A cell as text: the value (ratio to ext4 on attach), "n/a \[k\]" or "FAILED \[k\]" with `k`
/// the footnote giving the reason.
pub(super) fn print_rows(rows: &[Row], targets: &[String]) {
    let mut notes: Vec<String> = vec![];
    let mut note = |text: String| -> usize {
        match notes.iter().position(|n| *n == text) {
            Some(i) => i + 1,
            None => {
                notes.push(text);
                notes.len()
            }
        }
    };
    print!("{:<24}", "");
    for t in targets {
        print!(" {t:>17}");
    }
    println!();
    for r in rows {
        print!("{:<24}", format!("{} ({})", r.item, r.unit));
        for c in &r.cells {
            let text = match (&c.value, &c.failed, &c.not_applicable) {
                (_, Some(w), _) => format!("FAILED [{}]", note(format!("{}: {w}", c.target))),
                (Some(v), _, _) => {
                    let v = if r.unit == "s" {
                        format!("{v:.3}")
                    } else {
                        format!("{v:.0}")
                    };
                    match c.vs_ext4_attach {
                        Some(x) => format!("{v} ({x:.2}x)"),
                        None => v,
                    }
                }
                (None, None, Some(w)) => format!("n/a [{}]", note(w.clone())),
                (None, None, None) => "-".into(),
            };
            print!(" {text:>17}");
        }
        println!();
    }
    for (i, n) in notes.iter().enumerate() {
        println!("[{}] {n}", i + 1);
    }
}

pub(super) fn print_notes(notes: &[&str]) {
    for n in notes {
        println!("note: {n}");
    }
}

/// One panel per row set: bars per item, one series per configuration; `ratio` picks the
/// ratio to ext4 on attach (configurations but the base) or the value. Missing cells are 0.
pub(super) fn panel(
    title: String,
    rows: &[Row],
    targets: &[String],
    ratio: bool,
) -> plot::BarPanel {
    plot::BarPanel {
        title,
        groups: rows.iter().map(|r| r.item.clone()).collect(),
        series: targets
            .iter()
            .enumerate()
            .filter(|(_, t)| !ratio || *t != BASE)
            .map(|(i, t)| {
                let v = rows
                    .iter()
                    .map(|r| {
                        let c = &r.cells[i];
                        if ratio { c.vs_ext4_attach } else { c.value }.unwrap_or(0.0)
                    })
                    .collect();
                (t.clone(), v)
            })
            .collect(),
    }
}
