//! Shared by the crash and model tests: a plain in-memory model of the tree, the operations
//! both sides run, and a canonical snapshot of each side to compare.
#![allow(dead_code)]

pub(crate) mod crashcheck;

use pmkit_fs::{Error, Falloc, Fs, Kind, RenameFlags, SetAttr, XattrFlags, ROOT};
use pmkit_media::crashsim::CrashSim;
use pmkit_media::Media;
use std::collections::{BTreeMap, HashMap};

/// `n` bytes of a pattern that differs by `seed`.
pub(crate) fn seeded(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

/// A file system made with the tiny geometry on a crash simulator of `len` bytes, mounted.
pub(crate) fn tiny_fs(len: usize) -> Fs<CrashSim> {
    let sim = CrashSim::new(len);
    Fs::mkfs(&sim, &pmkit_fs::MkfsOptions::tiny()).unwrap();
    Fs::mount(sim, &pmkit_fs::MountOptions::default())
        .unwrap()
        .0
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Create(String),
    Mkdir(String),
    Write(String, u64, usize, u8),
    Truncate(String, u64),
    Fallocate(String, u64, u64),
    /// `Fs::fallocate_mode` (keep size, punch a hole, zero a range).
    FallocMode(String, u64, u64, Falloc),
    Link(String, String),
    Unlink(String),
    Rmdir(String),
    Rename(String, String, RenameFlags),
    Symlink(String, String),
    Chmod(String, u32),
    SetXattr(String, String, u8),
    RemoveXattr(String, String),
    /// `Fs::set_atomic` on a regular file.
    SetAtomic(String, bool),
    /// `Fs::set_huge` on a regular file.
    SetHuge(String, bool),
    /// `Fs::set_sums` on a regular file.
    SetSums(String, bool),
    /// `Fs::copy_range` (copy_file_range): source path and offset, destination path and
    /// offset, length.
    CopyRange(String, u64, String, u64, u64),
    /// `Fs::clone_range` (FICLONERANGE: the destination shares the source's blocks): source
    /// path and offset, destination path and offset, length (0: to the source's end).
    CloneRange(String, u64, String, u64, u64),
    /// O_TMPFILE: a file made with no name in the path's directory, `len` bytes written
    /// (seeded), then named the path (`Fs::link_tmpfile`) and closed.
    TmpLink(String, usize, u8),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MNode {
    pub kind: Kind,
    pub data: Vec<u8>,
    pub mode: u32,
    pub xattrs: BTreeMap<String, Vec<u8>>,
    /// The file's atomic flag.
    pub atomic: bool,
    /// The file's huge flag.
    pub huge: bool,
    /// The file's data checksums flag.
    pub sums: bool,
}

/// The model: path -> node id, id -> node.
#[derive(Clone, Debug, Default)]
pub(crate) struct Model {
    pub paths: BTreeMap<String, u64>,
    pub nodes: HashMap<u64, MNode>,
    pub next: u64,
    /// New files are atomic (the mount's `DataMode::Atomic`).
    pub atomic_default: bool,
    /// The largest write an atomic file takes (`Fs::max_atomic_write`; `None`: unbounded).
    pub max_atomic: Option<u64>,
}

fn parent_of(p: &str) -> &str {
    p.rfind('/').map(|i| &p[..i]).unwrap_or("")
}

pub(crate) fn data_of(off: u64, len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add(((off as usize + i) % 251) as u8) | 1)
        .collect()
}

impl Model {
    fn kind(&self, p: &str) -> Option<Kind> {
        if p.is_empty() {
            return Some(Kind::Dir);
        }
        self.paths.get(p).map(|id| self.nodes[id].kind)
    }
    fn children(&self, p: &str) -> usize {
        self.paths.keys().filter(|k| parent_of(k) == p).count()
    }
    fn new_node(&mut self, p: &str, kind: Kind, data: Vec<u8>, mode: u32) {
        self.next += 1;
        let n = MNode {
            kind,
            data,
            mode,
            xattrs: BTreeMap::new(),
            atomic: kind == Kind::File && self.atomic_default,
            huge: false,
            sums: false,
        };
        self.nodes.insert(self.next, n);
        self.paths.insert(p.to_string(), self.next);
    }
    fn drop_path(&mut self, p: &str) {
        let id = self.paths.remove(p).expect("path");
        if !self.paths.values().any(|&v| v == id) {
            self.nodes.remove(&id);
        }
    }
    /// Is `p` a regular file with the atomic flag?
    /// The file's size, if `p` names one.
    pub(crate) fn size_of(&self, p: &str) -> Option<u64> {
        self.paths.get(p).map(|id| self.nodes[id].data.len() as u64)
    }
    pub(crate) fn is_atomic(&self, p: &str) -> bool {
        self.paths.get(p).is_some_and(|id| self.nodes[id].atomic)
    }
    fn node_mut(&mut self, p: &str) -> Option<&mut MNode> {
        let id = *self.paths.get(p)?;
        self.nodes.get_mut(&id)
    }
    fn parent_ok(&self, p: &str) -> Result<(), ()> {
        match self.kind(parent_of(p)) {
            Some(Kind::Dir) => Ok(()),
            _ => Err(()),
        }
    }

    /// Apply `op`; Err(()) when the file system must refuse it too.
    pub(crate) fn apply(&mut self, op: &Op) -> Result<(), ()> {
        match op {
            Op::TmpLink(p, len, seed) => {
                self.parent_ok(p)?;
                if self.paths.contains_key(p) {
                    return Err(());
                }
                self.new_node(p, Kind::File, data_of(0, *len, *seed), 0o644);
            }
            Op::Create(p) | Op::Mkdir(p) | Op::Symlink(p, _) => {
                self.parent_ok(p)?;
                if self.paths.contains_key(p) {
                    return Err(());
                }
                match op {
                    Op::Create(_) => self.new_node(p, Kind::File, vec![], 0o644),
                    Op::Mkdir(_) => self.new_node(p, Kind::Dir, vec![], 0o755),
                    Op::Symlink(_, t) => {
                        self.new_node(p, Kind::Symlink, t.as_bytes().to_vec(), 0o777)
                    }
                    _ => unreachable!(),
                }
            }
            Op::Write(p, off, len, seed) => {
                let max = self.max_atomic;
                let n = self
                    .node_mut(p)
                    .filter(|n| n.kind == Kind::File)
                    .ok_or(())?;
                if n.atomic && max.is_some_and(|m| *len as u64 > m) {
                    return Err(());
                }
                let end = *off as usize + len;
                if n.data.len() < end {
                    n.data.resize(end, 0);
                }
                n.data[*off as usize..end].copy_from_slice(&data_of(*off, *len, *seed));
            }
            Op::Truncate(p, size) => {
                let n = self
                    .node_mut(p)
                    .filter(|n| n.kind == Kind::File)
                    .ok_or(())?;
                n.data.resize(*size as usize, 0);
            }
            Op::Fallocate(p, off, len) => {
                let n = self
                    .node_mut(p)
                    .filter(|n| n.kind == Kind::File)
                    .ok_or(())?;
                let end = (off + len) as usize;
                if n.data.len() < end {
                    n.data.resize(end, 0);
                }
            }
            Op::FallocMode(p, off, len, mode) => {
                let n = self
                    .node_mut(p)
                    .filter(|n| n.kind == Kind::File)
                    .ok_or(())?;
                let (off, end) = (*off as usize, (off + len) as usize);
                let grow = match mode {
                    Falloc::Allocate | Falloc::ZeroRange { keep_size: false } => end,
                    _ => 0,
                };
                if n.data.len() < grow {
                    n.data.resize(grow, 0);
                }
                if matches!(mode, Falloc::PunchHole | Falloc::ZeroRange { .. }) {
                    let z = end.min(n.data.len());
                    if off < z {
                        n.data[off..z].fill(0);
                    }
                }
            }
            Op::CopyRange(s, so, d, doff, len) => {
                let (si, di) = (*self.paths.get(s).ok_or(())?, *self.paths.get(d).ok_or(())?);
                let files = [si, di].iter().all(|i| self.nodes[i].kind == Kind::File);
                if !files {
                    return Err(());
                }
                let src = &self.nodes[&si].data;
                let end = so.saturating_add(*len).min(src.len() as u64);
                if *so >= end {
                    return Ok(());
                }
                if si == di && *so < doff + (end - so) && *doff < end {
                    return Err(());
                }
                let bytes = src[*so as usize..end as usize].to_vec();
                let dst = &mut self.nodes.get_mut(&di).unwrap().data;
                let stop = *doff as usize + bytes.len();
                if dst.len() < stop {
                    dst.resize(stop, 0);
                }
                dst[*doff as usize..stop].copy_from_slice(&bytes);
            }
            Op::CloneRange(s, so, d, doff, len) => {
                let (si, di) = (*self.paths.get(s).ok_or(())?, *self.paths.get(d).ok_or(())?);
                let ok = [si, di]
                    .iter()
                    .all(|i| self.nodes[i].kind == Kind::File && !self.nodes[i].sums);
                const B: u64 = 4096;
                if !ok || so % B != 0 || doff % B != 0 {
                    return Err(());
                }
                let size = self.nodes[&si].data.len() as u64;
                if *so >= size {
                    return match *len == 0 && *so == size {
                        true => Ok(()),
                        false => Err(()),
                    };
                }
                let count = match len {
                    0 => size - so,
                    _ => (*len).min(size - so),
                };
                let dsize = self.nodes[&di].data.len() as u64;
                let whole = count.next_multiple_of(B);
                // A partial last block only at the source's end, and not inside the
                // destination's size.
                let partial_ok = so + count == size && doff + count >= dsize;
                let bad = (count % B != 0 && !partial_ok)
                    || (si == di && *so < doff + whole && *doff < so + whole);
                if bad {
                    return Err(());
                }
                let bytes = self.nodes[&si].data[*so as usize..(so + count) as usize].to_vec();
                let dst = &mut self.nodes.get_mut(&di).unwrap().data;
                let stop = *doff as usize + bytes.len();
                if dst.len() < stop {
                    dst.resize(stop, 0);
                }
                dst[*doff as usize..stop].copy_from_slice(&bytes);
            }
            Op::Link(s, d) => {
                self.parent_ok(d)?;
                if self.kind(s).is_none_or(|k| k == Kind::Dir) {
                    return Err(());
                }
                if self.paths.contains_key(d) {
                    return Err(());
                }
                let id = self.paths[s];
                self.paths.insert(d.clone(), id);
            }
            Op::Unlink(p) => match self.kind(p) {
                Some(k) if k != Kind::Dir => self.drop_path(p),
                _ => return Err(()),
            },
            Op::Rmdir(p) => {
                if p.is_empty() || self.kind(p) != Some(Kind::Dir) || self.children(p) > 0 {
                    return Err(());
                }
                self.drop_path(p);
            }
            Op::Rename(s, d, flags) => {
                let sk = self.kind(s).filter(|_| !s.is_empty()).ok_or(())?;
                self.parent_ok(d)?;
                if d.is_empty() || d.starts_with(&format!("{s}/")) {
                    return Err(());
                }
                if s == d {
                    return Ok(());
                }
                let dk = self.kind(d);
                let (flags, whiteout) = match flags {
                    RenameFlags::Whiteout => (&RenameFlags::Replace, true),
                    RenameFlags::WhiteoutNoReplace => (&RenameFlags::NoReplace, true),
                    f => (f, false),
                };
                match (flags, dk) {
                    (RenameFlags::Exchange, None) => return Err(()),
                    (RenameFlags::Exchange, Some(_)) => {
                        if s.starts_with(&format!("{d}/")) {
                            return Err(());
                        }
                        let (a, b) = (self.paths[s], self.paths[d]);
                        self.move_tree(s, "\0tmp");
                        self.move_tree(d, s);
                        self.move_tree("\0tmp", d);
                        let _ = (a, b);
                        return Ok(());
                    }
                    (RenameFlags::NoReplace, Some(_)) => return Err(()),
                    (_, Some(dk)) => {
                        if self.paths[s] == self.paths[d] {
                            return Ok(());
                        }
                        match (sk == Kind::Dir, dk == Kind::Dir) {
                            (true, false) | (false, true) => return Err(()),
                            (true, true) if self.children(d) > 0 => return Err(()),
                            _ => {}
                        }
                        self.drop_path(d);
                    }
                    (_, None) => {}
                }
                self.move_tree(s, d);
                if whiteout {
                    // a character device 0:0, mode 0, where the source was
                    self.new_node(s, Kind::CharDev, vec![], 0);
                }
            }
            Op::Chmod(p, m) => {
                self.node_mut(p).ok_or(())?.mode = m & 0o7777;
            }
            Op::SetXattr(p, name, v) => {
                let n = self.node_mut(p).ok_or(())?;
                n.xattrs.insert(name.clone(), vec![*v; *v as usize % 7 + 1]);
            }
            Op::RemoveXattr(p, name) => {
                self.node_mut(p).ok_or(())?.xattrs.remove(name).ok_or(())?;
            }
            Op::SetAtomic(p, on) => {
                let n = self
                    .node_mut(p)
                    .filter(|n| n.kind == Kind::File)
                    .ok_or(())?;
                n.atomic = *on;
            }
            Op::SetHuge(p, on) => {
                let n = self
                    .node_mut(p)
                    .filter(|n| n.kind == Kind::File)
                    .ok_or(())?;
                n.huge = *on;
            }
            Op::SetSums(p, on) => {
                let n = self
                    .node_mut(p)
                    .filter(|n| n.kind == Kind::File)
                    .ok_or(())?;
                n.sums = *on;
            }
        }
        Ok(())
    }

    fn move_tree(&mut self, from: &str, to: &str) {
        let keys: Vec<String> = self
            .paths
            .keys()
            .filter(|k| *k == from || k.starts_with(&format!("{from}/")))
            .cloned()
            .collect();
        let moved: Vec<(String, u64)> = keys
            .iter()
            .map(|k| (k.clone(), self.paths.remove(k).unwrap()))
            .collect();
        for (k, id) in moved {
            self.paths.insert(format!("{to}{}", &k[from.len()..]), id);
        }
    }

    /// The canonical snapshot.
    pub(crate) fn snap(&self) -> Snap {
        let mut out = BTreeMap::new();
        for (p, id) in &self.paths {
            let n = &self.nodes[id];
            let links = match n.kind {
                Kind::Dir => {
                    2 + self
                        .paths
                        .iter()
                        .filter(|(k, v)| parent_of(k) == p && self.nodes[v].kind == Kind::Dir)
                        .count() as u32
                }
                _ => self.paths.values().filter(|&&v| v == *id).count() as u32,
            };
            let group = self
                .paths
                .iter()
                .find(|(_, &v)| v == *id)
                .unwrap()
                .0
                .clone();
            let data = if n.kind == Kind::Dir {
                vec![]
            } else {
                n.data.clone()
            };
            let x = n
                .xattrs
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            out.insert(
                p.clone(),
                Ent {
                    kind: n.kind,
                    data,
                    links,
                    mode: n.mode,
                    group,
                    xattrs: x,
                    atomic: n.atomic,
                    huge: n.huge,
                    sums: n.sums,
                },
            );
        }
        Snap(out)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ent {
    pub kind: Kind,
    pub data: Vec<u8>,
    pub links: u32,
    pub mode: u32,
    /// The first path (in order) naming the same inode: hard links agree.
    pub group: String,
    pub xattrs: Vec<(String, Vec<u8>)>,
    pub atomic: bool,
    pub huge: bool,
    pub sums: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Snap(pub BTreeMap<String, Ent>);

/// Resolve a path to (parent inode, last name), following directories only.
pub(crate) fn resolve<M: Media>(fs: &Fs<M>, p: &str) -> Result<(u64, String), Error> {
    let mut parts: Vec<&str> = p.split('/').collect();
    let last = parts.pop().unwrap().to_string();
    let mut dir = ROOT;
    for part in parts {
        dir = fs.lookup(dir, part.as_bytes())?.ino;
    }
    Ok((dir, last))
}

pub(crate) fn ino_of<M: Media>(fs: &Fs<M>, p: &str) -> Result<u64, Error> {
    let (d, n) = resolve(fs, p)?;
    Ok(fs.lookup(d, n.as_bytes())?.ino)
}

/// Run `op` on the file system.
pub(crate) fn run_op<M: Media>(fs: &Fs<M>, op: &Op) -> Result<(), Error> {
    match op {
        Op::TmpLink(p, len, seed) => {
            let (d, n) = resolve(fs, p)?;
            let a = fs.tmpfile_as(pmkit_fs::Owner::default(), d, 0o644)?;
            let r = fs
                .write(a.ino, 0, &data_of(0, *len, *seed))
                .and_then(|_| fs.link_tmpfile(a.ino, d, n.as_bytes()));
            fs.release(a.ino)?;
            r.map(|_| ())
        }
        Op::Create(p) => {
            let (d, n) = resolve(fs, p)?;
            fs.create(d, n.as_bytes(), 0o644).map(|_| ())
        }
        Op::Mkdir(p) => {
            let (d, n) = resolve(fs, p)?;
            fs.mkdir(d, n.as_bytes(), 0o755).map(|_| ())
        }
        Op::Symlink(p, t) => {
            let (d, n) = resolve(fs, p)?;
            fs.symlink(d, n.as_bytes(), t.as_bytes()).map(|_| ())
        }
        Op::Write(p, off, len, seed) => fs
            .write(ino_of(fs, p)?, *off, &data_of(*off, *len, *seed))
            .map(|_| ()),
        Op::Truncate(p, size) => {
            let s = SetAttr {
                size: Some(*size),
                ..Default::default()
            };
            fs.setattr(ino_of(fs, p)?, &s).map(|_| ())
        }
        Op::Fallocate(p, off, len) => fs.fallocate(ino_of(fs, p)?, *off, *len),
        Op::FallocMode(p, off, len, m) => fs.fallocate_mode(ino_of(fs, p)?, *off, *len, *m),
        Op::CopyRange(s, so, d, doff, len) => fs
            .copy_range(ino_of(fs, s)?, *so, ino_of(fs, d)?, *doff, *len)
            .map(drop),
        Op::CloneRange(s, so, d, doff, len) => fs
            .clone_range(ino_of(fs, s)?, *so, ino_of(fs, d)?, *doff, *len)
            .map(drop),
        Op::Link(s, d) => {
            let ino = ino_of(fs, s)?;
            let (dp, dn) = resolve(fs, d)?;
            fs.link(ino, dp, dn.as_bytes()).map(|_| ())
        }
        Op::Unlink(p) => {
            let (d, n) = resolve(fs, p)?;
            fs.unlink(d, n.as_bytes())
        }
        Op::Rmdir(p) => {
            let (d, n) = resolve(fs, p)?;
            fs.rmdir(d, n.as_bytes())
        }
        Op::Rename(s, d, flags) => {
            let (sp, sn) = resolve(fs, s)?;
            let (dp, dn) = resolve(fs, d)?;
            fs.rename(sp, sn.as_bytes(), dp, dn.as_bytes(), *flags)
        }
        Op::Chmod(p, m) => {
            let s = SetAttr {
                mode: Some(*m),
                ..Default::default()
            };
            fs.setattr(ino_of(fs, p)?, &s).map(|_| ())
        }
        Op::SetXattr(p, name, v) => fs.setxattr(
            ino_of(fs, p)?,
            name.as_bytes(),
            &vec![*v; *v as usize % 7 + 1],
            XattrFlags::Either,
        ),
        Op::RemoveXattr(p, name) => fs.removexattr(ino_of(fs, p)?, name.as_bytes()),
        Op::SetAtomic(p, on) => fs.set_atomic(ino_of(fs, p)?, *on),
        Op::SetHuge(p, on) => fs.set_huge(ino_of(fs, p)?, *on),
        Op::SetSums(p, on) => fs.set_sums(ino_of(fs, p)?, *on),
    }
}

/// The canonical snapshot of the file system's tree.
pub(crate) fn snap<M: Media>(fs: &Fs<M>) -> Result<Snap, String> {
    let mut out = BTreeMap::new();
    let mut groups: HashMap<u64, String> = HashMap::new();
    let mut stack = vec![(ROOT, String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        let mut ents = fs
            .readdir(dir)
            .map_err(|e| format!("readdir {prefix:?}: {e}"))?;
        ents.sort_by(|a, b| a.name.cmp(&b.name));
        for e in ents {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let name = String::from_utf8(e.name.clone()).unwrap();
            let path = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let a = fs
                .getattr(e.ino)
                .map_err(|err| format!("getattr {path}: {err}"))?;
            if a.kind != e.kind {
                return Err(format!(
                    "{path}: entry kind {:?} but inode kind {:?}",
                    e.kind, a.kind
                ));
            }
            let data = match a.kind {
                Kind::File => fs
                    .read(e.ino, 0, a.size as usize)
                    .map_err(|err| format!("read {path}: {err}"))?,
                Kind::Symlink => fs
                    .readlink(e.ino)
                    .map_err(|err| format!("readlink {path}: {err}"))?,
                _ => vec![],
            };
            if a.kind == Kind::File && data.len() as u64 != a.size {
                return Err(format!("{path}: read {} bytes of {}", data.len(), a.size));
            }
            let mut xattrs = Vec::new();
            for k in fs
                .listxattr(e.ino)
                .map_err(|err| format!("listxattr {path}: {err}"))?
            {
                let v = fs
                    .getxattr(e.ino, &k)
                    .map_err(|err| format!("getxattr {path}: {err}"))?;
                xattrs.push((String::from_utf8(k).unwrap(), v));
            }
            if a.kind == Kind::Dir {
                stack.push((e.ino, path.clone()));
            }
            groups.entry(e.ino).or_insert_with(|| path.clone());
            out.insert(
                path.clone(),
                Ent {
                    kind: a.kind,
                    data,
                    links: a.links,
                    mode: a.mode,
                    group: String::new(),
                    xattrs,
                    atomic: a.atomic,
                    huge: a.huge,
                    sums: a.sums,
                },
            );
            out.get_mut(&path).unwrap().group = e.ino.to_string();
        }
    }
    // groups: the smallest path of each inode
    let mut first: HashMap<String, String> = HashMap::new();
    for (p, e) in &out {
        first.entry(e.group.clone()).or_insert_with(|| p.clone());
    }
    for e in out.values_mut() {
        e.group = first[&e.group].clone();
    }
    Ok(Snap(out))
}

/// A short description of how two snapshots differ.
pub(crate) fn diff(a: &Snap, b: &Snap) -> String {
    let mut out = Vec::new();
    for (p, e) in &a.0 {
        match b.0.get(p) {
            None => out.push(format!("{p}: only on the left")),
            Some(f) if f != e => {
                let first = e.data.iter().zip(&f.data).position(|(x, y)| x != y);
                out.push(format!(
                    "{p}: kind {:?}/{:?} len {}/{} first differing byte {first:?} links {}/{} mode {:o}/{:o} group {}/{} xattrs {:?}/{:?} atomic {}/{}",
                    e.kind, f.kind, e.data.len(), f.data.len(), e.links, f.links, e.mode, f.mode, e.group, f.group, e.xattrs, f.xattrs, e.atomic, f.atomic
                ));
            }
            _ => {}
        }
    }
    for p in b.0.keys().filter(|p| !a.0.contains_key(*p)) {
        out.push(format!("{p}: only on the right"));
    }
    out.join("; ")
}
