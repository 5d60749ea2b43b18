#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pmkit_fuzz::fs_repair(data));
