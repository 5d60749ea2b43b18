//! PMO: persistent memory objects (being built; see issue 8).
