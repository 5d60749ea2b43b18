#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pmkit_fuzz::obj_pool(data));
