#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pmkit_fuzz::nbd_starttls(data));
