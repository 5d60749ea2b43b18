#!/usr/bin/env python3
"""House rules no compiler checks (TigerBeetle's tidy, in spirit). Exit 1 with one line per breach.

1. No module cycles inside a crate: the top-level modules of each crate's src/ form a DAG
   (a folder module counts as one node; `crate::x` and a top-level file's `super::x` are edges).
2. No source file over MAX_LINES lines (tests excluded): split it by job instead.
3. The repository stands alone: no references to files outside it (`../shared`, source seeds);
   cite a paper by title, authors and venue.
"""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
MAX_LINES = 800
CRATE_SRCS = ["media/src", "systems/blk/src", "systems/obj/src", "systems/fs/src", "systems/xmem/src", "frontends/nbd/src",
              "frontends/fuse/src", "frontends/cli/src", "bench/src", "fuzz/src"]
OUTSIDE = re.compile(r"\.\./shared|shared/seeds|\bseeds?\s+0\d\d\b", re.IGNORECASE)

USE_GROUP = re.compile(r"crate::\{([^}]*)\}", re.S)
USE_ONE = re.compile(r"crate::([a-z_][a-z0-9_]*)")
SUPER_ONE = re.compile(r"super::([a-z_][a-z0-9_]*)")


def tracked_files():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / line for line in out.stdout.splitlines()]


def module_graph(src: pathlib.Path):
    nodes = {p.stem for p in src.glob("*.rs") if p.stem not in ("lib", "main")}
    nodes |= {p.name for p in src.iterdir() if p.is_dir()}
    edges = {n: set() for n in nodes}
    for f in src.rglob("*.rs"):
        rel = f.relative_to(src).parts
        node = rel[0] if len(rel) > 1 else f.stem
        if node not in nodes:
            continue  # lib.rs / main.rs: the root may use anything
        text = strip_tests(f.read_text())
        names = set(USE_ONE.findall(text))
        for group in USE_GROUP.findall(text):
            names |= {g.strip().split("::")[0] for g in group.split(",") if g.strip()}
        if len(rel) == 1:  # a top-level file's `super` is the crate root
            names |= set(SUPER_ONE.findall(text))
        edges[node] |= {n for n in names if n in nodes and n != node}
    return edges


def strip_tests(text: str) -> str:
    """Drop `#[cfg(test)] mod tests { ... }` bodies: tests may reach across layers."""
    at = text.find("#[cfg(test)]")
    return text if at < 0 else text[:at]


def cycles(edges):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main() -> int:
    breaches = []
    for src in CRATE_SRCS:
        path = ROOT / src
        if not path.is_dir():
            continue
        edges = module_graph(path)
        for comp in cycles(edges):
            detail = "; ".join(f"{a} -> {', '.join(sorted(edges[a] & set(comp)))}" for a in comp)
            breaches.append(f"{src}: module cycle among {', '.join(comp)} ({detail})")
    this = pathlib.Path(__file__).resolve()
    for f in tracked_files():
        if not f.is_file() or f.resolve() == this:
            continue
        rel = f.relative_to(ROOT).as_posix()
        if f.suffix == ".rs" and "/src/" in f"/{rel}" and "/tests/" not in f"/{rel}":
            lines = f.read_text(errors="replace").count("\n")
            if lines > MAX_LINES:
                breaches.append(f"{rel}: {lines} lines (at most {MAX_LINES}); split it by job")
        if f.suffix in (".rs", ".md", ".sh", ".toml", ".h", ".c", ".py", ".txt"):
            for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
                if OUTSIDE.search(line):
                    breaches.append(f"{rel}:{n}: refers to a file outside the repository: "
                                    f"cite the paper instead ({line.strip()[:80]})")
    for b in breaches:
        print(f"tidy: {b}")
    if not breaches:
        print(f"tidy: ok ({len(CRATE_SRCS)} crates acyclic, sizes and references checked)")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
