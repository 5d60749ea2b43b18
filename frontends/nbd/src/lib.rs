//! NBD server (being built; see issue 4).
