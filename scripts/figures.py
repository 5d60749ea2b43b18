#!/usr/bin/env python3
"""Write docs/figures.md, the current figure of every benchmark, from docs/results/*.json.

docs/results/index.json says which JSON file is each benchmark's current run, the command that
made it, and which records and columns to show; docs/RESULTS.md keeps the history. The page is
generated so that its figures cannot drift from the JSON: `figures.py --check` exits 1 when
docs/figures.md is not what this script writes (CI runs it through scripts/check.sh).

A results file whose schema differs from what index.json expects never stops the page: a value
that is not there prints as "–".
"""

import json
import math
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
INDEX = RESULTS / "index.json"
OUT = ROOT / "docs" / "figures.md"
COMMAND = "python3 scripts/figures.py"
MISSING = "–"
# A path step: `[k=v]` or `[v]` (a bracketed selector), or a plain key or list index.
STEP = re.compile(r"\[[^\]]*\]|[^.\[\]]+")
NUMERIC = re.compile(r"^-?[\d,.]+( [KMG]i?B| B|%)?( \(.*x\))?$")


def dig(value, path: str):
    """The value at `path` inside `value`, or None wherever the data has no such thing."""
    for step in STEP.findall(path):
        if isinstance(value, dict) and not step.startswith("["):
            value = value.get(step)
        elif isinstance(value, list) and step.isdigit():
            value = value[int(step)] if int(step) < len(value) else None
        elif isinstance(value, list) and step.startswith("["):
            value = select(value, step[1:-1])
        else:
            return None
    return value


def select(items: list, selector: str):
    """`k=v`: the first record whose k is v; `v`: the first list whose first item is v."""
    key, eq, want = selector.partition("=")
    for item in items:
        if eq and isinstance(item, dict) and str(item.get(key)) == want:
            return item
        if not eq and isinstance(item, list) and item and str(item[0]) == selector:
            return item
    return None


def number(x) -> str:
    """Three significant figures, thousands separated; ints (counts, sizes) are exact."""
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    if not 1e-4 <= abs(x) < 1e15:
        return f"{x:.3g}"  # exponent form only where fixed digits would run on
    r = float(f"{x:.3g}")  # round first, so 9.996 becomes 10.0, not 10.00
    decimals = 2 - math.floor(math.log10(abs(r)))
    return f"{r:.{decimals}f}" if decimals > 0 else f"{int(r):,}"


def fraction(x) -> str:
    """A DRAM share reads better as 1/32 than as 0.0313."""
    return f"1/{int(1 / x)}" if 0 < x < 1 and float(1 / x).is_integer() else number(x)


def size(x) -> str:
    """A byte count as the sizes are named: 4 KiB, 1 MiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if x >= scale and x % scale == 0:
            return f"{x // scale:,} {unit}"
    return f"{number(x)} B"


FORMATS = {"fraction": fraction, "bytes": size, "percent": lambda x: number(100 * x) + "%"}


def show(x, fmt=None) -> str:
    """One table cell's text for any JSON value."""
    if x is None or isinstance(x, dict):
        return MISSING
    if isinstance(x, list):
        return ", ".join(show(v) for v in x) or MISSING
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return FORMATS.get(fmt, number)(x)
    return str(x).replace("|", "\\|").replace("\n", " ")


def expand(columns: list, data: dict) -> list:
    """The columns with every `each` column repeated once per name (a top-level list of the
    file, or the list given), `{name}` and `{i}` filled in."""
    out = []
    for col in columns:
        if "each" not in col:
            out.append(col)
            continue
        names = col["each"] if isinstance(col["each"], list) else dig(data, col["each"])
        for i, name in enumerate(names if isinstance(names, list) else []):
            fill = {k: v.replace("{name}", str(name)).replace("{i}", str(i))
                    for k, v in col.items() if isinstance(v, str)}
            out.append(fill)
    return out


def cell(row, col: dict) -> str:
    value = dig(row, col.get("path", ""))
    text = show(value, col.get("format"))
    ratio = dig(row, col["ratio"]) if "ratio" in col else None
    if value is not None and isinstance(ratio, (int, float)) and not isinstance(ratio, bool):
        text += f" ({number(ratio)}x)"
    return text


def table(spec: dict, data: dict) -> list:
    """A Markdown table of the records at spec["rows"] (the whole file when it is "")."""
    rows = dig(data, spec.get("rows", "")) if spec.get("rows") else data
    rows = [rows] if isinstance(rows, dict) else rows
    columns = expand(spec.get("columns", []), data)
    lines = [f"{spec['caption']}:", ""] if spec.get("caption") else []
    if not isinstance(rows, list) or not rows or not columns:
        return lines + [f"(no records at `{spec.get('rows')}` in this file)", ""]
    cells = [[cell(row, c) for c in columns] for row in rows]
    # Numbers right-aligned, so that magnitudes line up down a column.
    numeric = [all(NUMERIC.match(r[i]) or r[i] == MISSING for r in cells) for i in range(len(columns))]
    lines.append("| " + " | ".join(show(c.get("name", "")) for c in columns) + " |")
    lines.append("|" + "|".join("---:" if n else "---" for n in numeric) + "|")
    lines += ["| " + " | ".join(r) + " |" for r in cells]
    return lines + [""]


def section(entry: dict) -> list:
    name, file = entry.get("benchmark", "?"), entry.get("file", "?")
    lines = [f"## {name}", "", entry.get("title", ""), ""]
    lines += ["```", *entry.get("setup", []), entry.get("command", "(no command recorded)"), "```", ""]
    if entry.get("command_source") == "inferred":
        lines += ["The command is inferred: " + entry.get("command_note", "docs/RESULTS.md does not give it") + ".", ""]
    elif entry.get("command_note"):
        lines += ["About the command: " + entry["command_note"] + ".", ""]
    try:
        data = json.loads((RESULTS / file).read_text(encoding="utf-8"))
        problem = None if isinstance(data, dict) else "it is not a JSON object"
    except (OSError, ValueError) as e:
        data, problem = None, type(e).__name__
    if problem:
        lines += [f"**`results/{file}` cannot be shown** ({problem}).", ""]
    data = data if isinstance(data, dict) else {}
    # The file's own record of its machine wins over index.json's, which a person copied.
    cpu = data.get("cpu") or entry.get("cpu") or "not recorded"
    lines += [f"CPU: {cpu}. Raw output: [`results/{file}`](results/{file}). "
              f"Described in docs/RESULTS.md, \"{entry.get('results_section', '?')}\".", ""]
    if data:
        for spec in entry.get("tables", []):
            lines += table(spec, data)
    svg = entry.get("svg")
    if svg and (RESULTS / svg).exists():
        lines += [f"![{name}](results/{svg})", ""]
    history = entry.get("history", [])
    if history:
        lines += ["History (older runs and variants; docs/RESULTS.md tells them in the order they were made):", ""]
        lines += [f"- [`{h.get('file')}`](results/{h.get('file')}): {h.get('note', '')}" for h in history]
        lines.append("")
    return lines


def render() -> str:
    index = json.loads(INDEX.read_text(encoding="utf-8"))
    entries = sorted(index.get("benchmarks", []), key=lambda e: e.get("benchmark", ""))
    lines = [
        "# Current figures",
        "",
        "The current figure of every benchmark, one section each: the command that gives it, the",
        "machine it ran on, its table and its plot. Figures from different machines do not compare.",
        "",
        f"Generated from `docs/results/*.json` by `{COMMAND}`: do not edit this page by hand.",
        "`docs/results/index.json` says which file is each benchmark's current run and which columns",
        f"to show. CI runs `{COMMAND} --check`, which fails when this page is stale. The",
        "history, every run in the order the runs were made and what each one showed, is",
        "`docs/RESULTS.md`.",
        "",
        "Numbers have three significant figures; \"–\" is a value the run did not record.",
        "",
        "| benchmark | what it measures | current run |",
        "|---|---|---|",
    ]
    for e in entries:
        lines.append(f"| [{e.get('benchmark')}](#{e.get('benchmark')}) | {show(e.get('title'))} | `{e.get('file')}` |")
    lines.append("")
    for e in entries:
        lines += section(e)
    # A results file nobody filed under a benchmark is a figure no reader would find.
    named = {e.get("file") for e in entries} | {h.get("file") for e in entries for h in e.get("history", [])}
    stray = sorted(p.name for p in RESULTS.glob("*.json") if p != INDEX and p.name not in named)
    if stray:
        lines += ["## Not in index.json", "", ", ".join(f"`{s}`" for s in stray), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"figures: docs/figures.md is not what docs/results says; run {COMMAND}")
            return 1
        print("figures: ok (docs/figures.md matches docs/results)")
        return 0
    OUT.write_text(text, encoding="utf-8")  # UTF-8 whatever the locale: the page has µ and –
    print(f"figures: wrote {OUT.relative_to(ROOT)} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
