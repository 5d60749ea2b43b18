//! Crash simulator (being written).
