//! `rockstate verify <savepoint file>` reads the file whole (header, index, every block's
//! checksum and entries) and says ok (exit 0) or names what is wrong (exit 1); `inspect` reads
//! only the header and index, so a damaged block shows only here. A file that cannot be read
//! at all is exit 3.

mod cli_fixture;

use cli_fixture::{code, rockstate, stderr, stdout, Fixture};

#[test]
fn verify_reads_every_block_of_a_savepoint() {
    let f = Fixture::new();
    let sp = f.dir.path().join("sp.rssp");
    let arg = sp.to_str().unwrap();
    let o = rockstate(&["verify", arg]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).starts_with("ok: savepoint"), "{}", stdout(&o));
    let o = rockstate(&["verify", "--json", arg]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["entries"], 300);

    // A flipped byte inside the first block (right after the header): `inspect` still reads
    // the file, `verify` names the damage.
    let mut bytes = std::fs::read(&sp).unwrap();
    let header_len = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    let in_block = 12 + header_len + 4 + 20;
    bytes[in_block] ^= 0x40;
    let damaged = f.dir.path().join("damaged.rssp");
    std::fs::write(&damaged, &bytes).unwrap();
    let damaged = damaged.to_str().unwrap();
    assert_eq!(code(&rockstate(&["inspect", damaged])), 0);
    let o = rockstate(&["verify", damaged]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).starts_with("BAD "), "{}", stdout(&o));
    assert!(stdout(&o).contains("damaged.rssp"), "{}", stdout(&o));
    let o = rockstate(&["verify", "--json", damaged]);
    assert_eq!(code(&o), 1);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["ok"], false);
    assert!(
        v["problems"][0]["problem"]
            .as_str()
            .unwrap()
            .contains("crc")
            || v["problems"][0]["problem"]
                .as_str()
                .unwrap()
                .contains("checksum"),
        "{v}"
    );
}
