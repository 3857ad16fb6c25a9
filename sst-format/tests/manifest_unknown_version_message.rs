//! docs/manifest-format.md §1: this build reads manifest versions 4, 3, 2 and 1. The typed
//! error for any other version tells the operator which versions the build reads; it must
//! list all four.

#[test]
fn unknown_version_error_lists_every_readable_version() {
    let mut bytes = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/corpus/manifest_decode/v4_tables.rstm"),
    )
    .unwrap();
    bytes[4..6].copy_from_slice(&5u16.to_le_bytes());
    let err = sst_format::decode_manifest(&bytes).unwrap_err();
    assert!(matches!(err, sst_format::Error::UnknownManifestVersion(5)));
    let msg = err.to_string();
    for v in ["1", "2", "3", "4"] {
        assert!(msg.contains(v), "message omits version {v}: {msg:?}");
    }
}
