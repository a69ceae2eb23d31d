//! The plugin configuration parser on arbitrary bytes: never panics; every
//! error names a path and a message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate::config::Config;

fuzz_target!(|data: &[u8]| {
    match Config::from_json(data) {
        Ok(config) => assert!(!config.rules.is_empty()),
        Err(e) => {
            assert!(!e.path().is_empty());
            assert!(!e.to_string().is_empty());
        }
    }
});
