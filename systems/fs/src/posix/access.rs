//! Permission checks for a caller with credentials, as the kernel makes them (`generic_permission`
//! and `may_delete` in spirit): mode bits for the owner, the group (the caller's effective group
//! or one of its supplementary groups) and others; the sticky directory rule; root (uid 0)
//! passes every read and write check, and an execute check where any execute bit is set or the
//! node is a directory (CAP_DAC_OVERRIDE), and owns everything (CAP_FOWNER, CAP_CHOWN).
//!
//! [`Posix`](super::Posix) checks only when given credentials (`Posix::set_cred`): the LD_PRELOAD
//! shim gives the process's and updates them when it changes them; the library and its C ABI
//! give none, and then nothing is checked (the process holds the pool exclusively).

use crate::{Attr, Error, Kind, Result};

/// Read, write, execute (search for a directory): the bits of one class in a mode.
pub(super) const R: u32 = 4;
pub(super) const W: u32 = 2;
pub(super) const X: u32 = 1;

/// Most supplementary groups kept (Linux's `NGROUPS_MAX`).
pub const MAX_GROUPS: usize = 65_536;

/// Who is asking: effective user and group and the supplementary groups.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

impl Cred {
    pub fn new(uid: u32, gid: u32, mut groups: Vec<u32>) -> Cred {
        groups.truncate(MAX_GROUPS);
        Cred { uid, gid, groups }
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Whether `gid` is the caller's effective group or one of its supplementary groups.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    /// Whether `want` (a mix of 4 read, 2 write, 1 execute or search) is allowed on the node `a`.
    pub fn may(&self, a: &Attr, want: u32) -> bool {
        debug_assert!(want <= R | W | X);
        if self.is_root() {
            return want & X == 0 || a.kind == Kind::Dir || a.mode & 0o111 != 0;
        }
        let bits = if self.uid == a.uid {
            a.mode >> 6
        } else if self.in_group(a.gid) {
            a.mode >> 3
        } else {
            a.mode
        } & 0o7;
        bits & want == want
    }

    /// [`Cred::may`] as a result: EACCES, naming what was refused.
    pub fn check(&self, a: &Attr, want: u32, what: &'static str) -> Result<()> {
        match self.may(a, want) {
            true => Ok(()),
            false => Err(Error::Access(what)),
        }
    }

    /// Whether the caller owns `a` (or is root): who may chmod, set explicit times, chown.
    pub fn owns(&self, a: &Attr) -> bool {
        self.is_root() || self.uid == a.uid
    }

    /// Removing or replacing `victim` in directory `dir`: write and search on `dir`, and in a
    /// sticky directory only the owner of the victim or of the directory (or root).
    pub fn may_delete(&self, dir: &Attr, victim: &Attr) -> Result<()> {
        self.check(dir, W | X, "no write permission on the directory")?;
        if dir.mode & libc::S_ISVTX != 0 && !self.owns(victim) && self.uid != dir.uid {
            return Err(Error::Perm(
                "sticky directory: only the owner of the entry or the directory may remove it",
            ));
        }
        Ok(())
    }

    /// The mode chmod stores: as asked, less set-group-ID when a caller who is not root is
    /// not in the file's group (Linux's `setattr_should_drop_sgid` at chmod).
    pub fn chmod_mode(&self, a: &Attr, mode: u32) -> u32 {
        let mode = mode & 0o7777;
        match !self.is_root() && !self.in_group(a.gid) && a.kind != Kind::Dir {
            true => mode & !libc::S_ISGID,
            false => mode,
        }
    }

    /// Whether chown to `uid`/`gid` (`None`: unchanged) is allowed on `a`: root may do
    /// anything; an owner may keep the user and give the file a group it is in.
    pub fn may_chown(&self, a: &Attr, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        if self.is_root() {
            return Ok(());
        }
        if uid.is_none() && gid.is_none() {
            // No id changes: Linux checks only the mode change a chown of a non-directory
            // makes (its set-ID bits cleared), which needs ownership.
            if a.kind != Kind::Dir && crate::killed_suidgid(a.mode) != a.mode && !self.owns(a) {
                return Err(Error::Perm("only the owner may clear the set-ID bits"));
            }
            return Ok(());
        }
        let uid_ok = uid.is_none_or(|u| u == a.uid);
        let gid_ok = gid.is_none_or(|g| g == a.gid || self.in_group(g));
        if self.uid == a.uid && uid_ok && gid_ok {
            return Ok(());
        }
        Err(Error::Perm(
            "only root may give a file away, and an owner only to its groups",
        ))
    }

    /// Setting times: explicit times need ownership (EPERM); "now" for both needs ownership or
    /// write permission (EACCES).
    pub fn may_set_times(&self, a: &Attr, now_only: bool) -> Result<()> {
        if self.owns(a) {
            return Ok(());
        }
        if now_only {
            return self.check(a, W, "no write permission to set the times to now");
        }
        Err(Error::Perm("only the owner may set explicit times"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(kind: Kind, mode: u32, uid: u32, gid: u32) -> Attr {
        Attr {
            ino: 2,
            kind,
            size: 0,
            links: 1,
            mode,
            uid,
            gid,
            atime: 0,
            mtime: 0,
            ctime: 0,
            blocks: 0,
            atomic: false,
            huge: false,
            sums: false,
            rdev: 0,
        }
    }

    #[test]
    fn classes_are_chosen_in_order_and_root_passes() {
        let f = node(Kind::File, 0o640, 10, 20);
        let owner = Cred::new(10, 99, vec![]);
        let member = Cred::new(11, 99, vec![20]);
        let other = Cred::new(12, 99, vec![]);
        assert!(owner.may(&f, R | W) && !owner.may(&f, X));
        assert!(member.may(&f, R) && !member.may(&f, W));
        assert!(!other.may(&f, R));
        // The owner class decides for the owner even where the group's bits would allow.
        let g = node(Kind::File, 0o070, 10, 20);
        assert!(!Cred::new(10, 20, vec![]).may(&g, R));
        let root = Cred::new(0, 0, vec![]);
        assert!(root.may(&f, R | W));
        assert!(!root.may(&f, X), "root executes only what someone may");
        assert!(
            root.may(&node(Kind::Dir, 0, 1, 1), X),
            "root searches any directory"
        );
    }

    #[test]
    fn sticky_directories_keep_others_entries() {
        let dir = node(Kind::Dir, 0o1777, 1, 1);
        let victim = node(Kind::File, 0o644, 2, 2);
        assert!(Cred::new(2, 9, vec![]).may_delete(&dir, &victim).is_ok());
        assert!(Cred::new(1, 9, vec![]).may_delete(&dir, &victim).is_ok());
        assert_eq!(
            Cred::new(3, 9, vec![])
                .may_delete(&dir, &victim)
                .unwrap_err()
                .errno(),
            libc::EPERM
        );
        let plain = node(Kind::Dir, 0o755, 1, 1);
        assert_eq!(
            Cred::new(3, 9, vec![])
                .may_delete(&plain, &victim)
                .unwrap_err()
                .errno(),
            libc::EACCES
        );
    }

    #[test]
    fn chown_chmod_and_times_follow_the_owner_rules() {
        let f = node(Kind::File, 0o2755, 10, 20);
        let owner = Cred::new(10, 30, vec![31]);
        assert!(owner.may_chown(&f, None, Some(31)).is_ok());
        assert!(owner.may_chown(&f, Some(10), Some(20)).is_ok());
        assert!(owner.may_chown(&f, Some(11), None).is_err());
        assert!(owner.may_chown(&f, None, Some(32)).is_err());
        // chown(f, -1, -1): nothing to check but the set-ID bits it clears.
        let stranger = Cred::new(12, 99, vec![]);
        assert!(stranger
            .may_chown(&node(Kind::File, 0o755, 10, 20), None, None)
            .is_ok());
        assert!(stranger.may_chown(&f, None, None).is_err());
        assert!(stranger
            .may_chown(&node(Kind::Dir, 0o2755, 10, 20), None, None)
            .is_ok());
        assert!(owner.may_chown(&f, None, None).is_ok());
        assert!(Cred::new(0, 0, vec![])
            .may_chown(&f, Some(11), Some(32))
            .is_ok());
        assert_eq!(
            owner.chmod_mode(&f, 0o2755),
            0o755,
            "not in the file's group"
        );
        assert_eq!(Cred::new(10, 20, vec![]).chmod_mode(&f, 0o2755), 0o2755);
        let writable = node(Kind::File, 0o666, 10, 20);
        let other = Cred::new(12, 99, vec![]);
        assert!(other.may_set_times(&writable, true).is_ok());
        assert_eq!(
            other.may_set_times(&writable, false).unwrap_err().errno(),
            libc::EPERM
        );
        assert_eq!(
            other.may_set_times(&f, true).unwrap_err().errno(),
            libc::EACCES
        );
    }
}
