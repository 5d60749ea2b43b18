#!/usr/bin/env python3
"""House rules no compiler checks (TigerBeetle's tidy, in spirit). Exit 1 with one line per breach.

1. No module cycles in any crate at any level: the child modules of every module form a DAG.
   An edge a -> b between two children of one module means code somewhere under `a` names
   something under `b` (a `use` or a path, through `crate::`, `super::`, `self::` or a child's
   plain name). Comments and `#[cfg(test)]` code do not count. The crates are the workspace's
   and the fuzz workspace's, from `cargo metadata`.
2. No source file over MAX_LINES lines (tests excluded): split it by job instead.
3. The repository stands alone: no references to files outside it (`../shared`, source seeds);
   cite a paper by title, authors and venue. Code cites no issue numbers either.
4. Ratchets (`scripts/tidy-floors.json`, per crate, code outside tests): assertions per function
   may only rise, functions over LONG_FN lines and files over LONG_FILE lines may only become
   fewer. `tidy.py --ratchet` writes the file anew once a crate has improved.
"""

import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
MAX_LINES = 800
LONG_FN = 70
LONG_FILE = 600
FLOORS = ROOT / "scripts" / "tidy-floors.json"
ASSERT = re.compile(r"\b(?:debug_)?assert(?:_eq|_ne)?!")
FN = re.compile(r"\bfn\s+[A-Za-z_][A-Za-z0-9_]*")
OUTSIDE = re.compile(r"\.\./shared|shared/seeds|\bseeds?\s+0\d\d\b", re.IGNORECASE)
# Code says why in its own words or cites a paper or a doc; an issue number means nothing to a
# reader of the repository.
ISSUE = re.compile(r"\bissue\s+#?\d+", re.IGNORECASE)

MOD_DECL = re.compile(r"^\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", re.M)
USE_STMT = re.compile(r"\buse\s+([^;]+);")
PATH_EXPR = re.compile(r"\b((?:crate|super|self)(?:\s*::\s*[A-Za-z_][A-Za-z0-9_]*)+)")
IDENT_PATH = re.compile(r"(?<![:\w])([a-z_][a-z0-9_]*)\s*::\s*[A-Za-z_]")


def tracked_files():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / line for line in out.stdout.splitlines()]


def crate_roots():
    """(name, root file) of every library and binary target of both workspaces."""
    roots = []
    for manifest in [ROOT / "Cargo.toml", ROOT / "fuzz" / "Cargo.toml"]:
        if not manifest.exists():
            continue
        meta = json.loads(subprocess.run(
            ["cargo", "metadata", "--no-deps", "--format-version", "1", "--offline",
             "--manifest-path", str(manifest)],
            cwd=ROOT, capture_output=True, text=True, check=True).stdout)
        for pkg in meta["packages"]:
            for t in pkg["targets"]:
                if set(t["kind"]) & {"lib", "bin", "cdylib", "rlib", "staticlib"}:
                    root = pathlib.Path(t["src_path"])
                    if root.is_relative_to(ROOT):
                        roots.append((f"{pkg['name']}:{t['name']}", root))
    seen, out = set(), []
    for name, root in roots:
        if root not in seen:
            seen.add(root)
            out.append((name, root))
    return out


def code_of(path: pathlib.Path) -> str:
    """The file's code: comments, strings and `#[cfg(test)]` items dropped."""
    text = strip_literals(path.read_text(errors="replace"))
    out, at = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]", text):
        if m.start() < at:
            continue
        out.append(text[at:m.start()])
        at = item_end(text, m.end())
    out.append(text[at:])
    return "".join(out)


def strip_literals(text: str) -> str:
    """`text` without comments and with every string and char literal emptied (a scanner, so a
    quote inside a char literal or a `//` inside a string cannot mislead it)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 8]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = len(re.match(r'r(#*)"', text[i:]).group(1))
            end = text.find('"' + "#" * hashes, i + 2 + hashes)
            out.append('""')
            i = n if end < 0 else end + 1 + hashes
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            out.append('""')
            i += 1
        elif c == "'" and re.match(r"'(\\.[^']*|[^'\\])'", text[i:i + 12]):
            m = re.match(r"'(\\.[^']*|[^'\\])'", text[i:i + 12])
            out.append("' '")
            i += m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def item_end(text: str, i: int) -> int:
    """The end of the item starting at `i`: its matching `}`, or its `;` if that comes first."""
    depth = 0
    while i < len(text):
        ch = text[i]
        if ch == ";" and depth == 0:
            return i + 1
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def module_tree(root: pathlib.Path):
    """{module path (tuple): file} for every file module reachable from `root`."""
    mods = {}

    def walk(path: tuple, file: pathlib.Path):
        mods[path] = file
        if file.name in ("lib.rs", "main.rs", "mod.rs") or path == ():
            child_dir = file.parent
        else:
            child_dir = file.parent / file.stem
        for name in MOD_DECL.findall(code_of(file)):
            for cand in (child_dir / f"{name}.rs", child_dir / name / "mod.rs"):
                if cand.exists():
                    walk(path + (name,), cand)
                    break

    walk((), root)
    return mods


def expand_use(tree: str):
    """`a::{b, c::{d, e}}` -> [[a, b], [a, c, d], [a, c, e]] (names only)."""
    tree = re.sub(r"\s+", "", tree)

    def split_top(s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        return parts

    def rec(s):
        s = s.split(" as ")[0]
        if "{" in s:
            at = s.index("{")
            prefix = [p for p in s[:at].split("::") if p]
            inner = s[at + 1:s.rindex("}")]
            return [prefix + r for part in split_top(inner) for r in rec(part)]
        return [[p for p in re.sub(r"as[A-Za-z_0-9]+$", "", s).split("::") if p]]

    return rec(tree)


def resolve(here: tuple, segs: list, mods: dict):
    """The module path `segs` names from module `here`: the longest module prefix, or None."""
    if not segs:
        return None
    base = None
    i = 0
    if segs[0] == "crate":
        base, i = (), 1
    elif segs[0] in ("self", "super"):
        base = here
        while i < len(segs) and segs[i] in ("self", "super"):
            if segs[i] == "super":
                if not base:
                    return None
                base = base[:-1]
            i += 1
    elif here + (segs[0],) in mods:
        base = here
    else:
        return None
    path = base
    for s in segs[i:]:
        if path + (s,) in mods:
            path = path + (s,)
        else:
            break
    return path


def module_edges(mods: dict):
    """{parent: {child: set(sibling children it reaches)}}."""
    edges = {}
    for here, file in mods.items():
        code = code_of(file)
        refs = []
        for tree in USE_STMT.findall(code):
            refs += expand_use(tree)
        refs += [re.sub(r"\s+", "", p).split("::") for p in PATH_EXPR.findall(code)]
        refs += [[name] for name in IDENT_PATH.findall(code)]
        for segs in refs:
            target = resolve(here, segs, mods)
            if target is None:
                continue
            d = 0
            while d < min(len(here), len(target)) and here[d] == target[d]:
                d += 1
            if d < len(here) and d < len(target):
                parent = here[:d]
                edges.setdefault(parent, {}).setdefault(here[d], set()).add(target[d])
    return edges


def cycles(edges):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    nodes = set(edges) | {w for ws in edges.values() for w in ws}
    edges = {v: edges.get(v, set()) for v in nodes}

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

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out, edges


def functions(code: str):
    """(first line, last line) of every function with a body in `code`."""
    out = []
    for m in FN.finditer(code):
        i, depth = m.end(), 0
        # the body's `{` comes before any `;` at depth 0 (a declaration without body has none)
        while i < len(code) and code[i] not in "{;":
            i += 1
        if i >= len(code) or code[i] == ";":
            continue
        end = item_end(code, i)
        out.append((code.count("\n", 0, m.start()), code.count("\n", 0, end)))
    return out


def measures(mods: dict):
    """A crate's ratchet figures over its modules' code (tests dropped)."""
    fns = asserts = long_fns = long_files = 0
    for file in set(mods.values()):
        code = code_of(file)
        spans = functions(code)
        fns += len(spans)
        asserts += len(ASSERT.findall(code))
        long_fns += sum(1 for a, b in spans if b - a + 1 > LONG_FN)
        long_files += file.read_text(errors="replace").count("\n") > LONG_FILE
    return {
        "asserts_per_fn": round(asserts / max(fns, 1), 3),
        "fns_over_%d_lines" % LONG_FN: long_fns,
        "files_over_%d_lines" % LONG_FILE: long_files,
    }


def ratchet(figures: dict, write: bool):
    """Breaches of the checked-in floors (after `write`: of the floors raised to what improved)."""
    floors = json.loads(FLOORS.read_text()) if FLOORS.exists() else {}
    if write:
        # Only ever in the better direction: a crate that got worse keeps its floor.
        better = {}
        for crate, got in figures.items():
            want = floors.get(crate, got)
            better[crate] = {k: (max(v, want.get(k, v)) if k == "asserts_per_fn" else min(v, want.get(k, v)))
                             for k, v in got.items()}
        FLOORS.write_text(json.dumps(better, indent=1, sort_keys=True) + "\n")
        floors = better
    out = []
    for crate, got in sorted(figures.items()):
        want = floors.get(crate)
        if want is None:
            out.append(f"{crate}: no floors in {FLOORS.name}; run scripts/tidy.py --ratchet")
            continue
        for k, v in got.items():
            worse = v < want.get(k, v) if k == "asserts_per_fn" else v > want.get(k, v)
            if worse:
                out.append(f"{crate}: {k} is {v}, the floor is {want[k]} (it may only improve)")
    return out


def main() -> int:
    breaches = []
    roots = crate_roots()
    modules = 0
    figures = {}
    for name, root in roots:
        mods = module_tree(root)
        modules += len(mods)
        crate = name.split(":")[0]
        got = measures(mods)
        if crate in figures:  # a package's second target (lib and bin): sum them
            prev = figures[crate]
            got = {k: (max(v, prev[k]) if k == "asserts_per_fn" else v + prev[k]) for k, v in got.items()}
        figures[crate] = got
        for parent, edges in sorted(module_edges(mods).items()):
            comps, full = cycles(edges)
            for comp in comps:
                where = "::".join(parent) or "the crate root"
                detail = "; ".join(f"{a} -> {', '.join(sorted(full[a] & set(comp)))}" for a in comp)
                breaches.append(f"{name}: module cycle in {where} among {', '.join(comp)} ({detail})")
    breaches += ratchet(figures, "--ratchet" in sys.argv)
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
                if f.suffix in (".rs", ".sh", ".h", ".c", ".py") and ISSUE.search(line):
                    breaches.append(f"{rel}:{n}: code cites an issue number: say what it means, "
                                    f"or cite the paper or doc ({line.strip()[:80]})")
    for b in breaches:
        print(f"tidy: {b}")
    if not breaches:
        print(f"tidy: ok ({len(roots)} crate targets, {modules} modules acyclic at every level, "
              "sizes, references and ratchets checked)")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
