//! PMBD: a protected, persistent block device on PM (being built; see issue 3).
