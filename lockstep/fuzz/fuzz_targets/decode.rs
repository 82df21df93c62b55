//! Fuzzes the wire decoder: never panics, and whatever it accepts re-encodes
//! to exactly the input (canonical-only decoding).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(packet) = lockstep::low_level::wire::decode(data) {
        let mut again = Vec::new();
        packet.encode(&mut again);
        assert_eq!(again, data, "accepted packet must re-encode identically");
    }
    if let Ok((header, len)) = lockstep::low_level::wire::decode_header(data) {
        assert!(len <= data.len());
        assert_eq!(lockstep::low_level::wire::header_len(&header), len);
    }
});
