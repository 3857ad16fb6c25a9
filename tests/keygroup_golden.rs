//! Golden vectors pinning the key-group hash forever: checkpoints depend on it.
//!
//! Obtained from an independent implementation, Python's `mmh3` package (PyPI, 5.x):
//! `mmh3.hash(data, 0, signed=False)`, then `% 128` and `% 32768`. Regenerate with
//! `pip install mmh3 && python3 -c "import mmh3; print(mmh3.hash(b'hello', 0, signed=False))"`.

use rockstate::keygroup::{key_group_of, murmur3_x86_32};

const GOLDEN: &[(&str, u32, u16, u16)] = &[
    ("", 0, 0, 0),
    ("61", 1009084850, 50, 27058),
    ("6162", 2613040991, 95, 22367),
    ("616263", 3017643002, 122, 5114),
    ("61626364", 1139631978, 106, 26474),
    ("68656c6c6f", 613153351, 71, 31303),
    ("68656c6c6f20776f726c6421", 774705101, 77, 4045),
    ("0001020304050607", 3512850035, 115, 22131),
    ("000000000000002a", 2202676023, 55, 11063),
    ("ffffffffffffffffffffffffff", 365846922, 10, 24970),
];

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn murmur3_matches_python_mmh3() {
    for (hex, hash, g128, g32768) in GOLDEN {
        let data = unhex(hex);
        assert_eq!(murmur3_x86_32(&data, 0), *hash, "hash of {hex}");
        assert_eq!(key_group_of(&data, 128), *g128, "group/128 of {hex}");
        assert_eq!(key_group_of(&data, 32768), *g32768, "group/32768 of {hex}");
    }
}
