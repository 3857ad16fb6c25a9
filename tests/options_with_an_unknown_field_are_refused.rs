//! Settings given as JSON (`rockstate-bench --options/--changelog/--budget`, the timely
//! example's `--changelog`, an engine's configuration file) name every field they set; a
//! misspelt field is refused with an error naming it instead of leaving that setting at its
//! default unnoticed (a benchmark of `{"materialize_log_percnt":25}` measured the default
//! and said nothing).

use rockstate::{ChangelogOptions, CheckpointOptions, DbOptions, MemoryBudgetConfig};

fn refused<T: serde::de::DeserializeOwned + std::fmt::Debug>(json: &str, field: &str) {
    let parsed = serde_json::from_str::<T>(json);
    let e = parsed.expect_err(&format!("{json} was accepted"));
    assert!(e.to_string().contains(field), "{json}: {e}");
}

#[test]
fn a_misspelt_settings_field_is_an_error_naming_it() {
    refused::<DbOptions>(r#"{"max_value_byte": 10}"#, "max_value_byte");
    refused::<MemoryBudgetConfig>(r#"{"total_byte": 10}"#, "total_byte");
    refused::<CheckpointOptions>(r#"{"retained": 2, "retain": 3}"#, "retain");
    refused::<ChangelogOptions>(
        r#"{"materialize_log_percnt": 25}"#,
        "materialize_log_percnt",
    );
    let e = ChangelogOptions::enabled_from_json(r#"{"materialize_log_percnt": 25}"#)
        .expect_err("a misspelt changelog field was accepted");
    assert!(e.to_string().contains("materialize_log_percnt"), "{e}");

    // Fields spelt right still parse, the others keeping their defaults.
    let c = ChangelogOptions::enabled_from_json(r#"{"materialize_log_percent": 25}"#).unwrap();
    assert_eq!(c.materialize_log_percent, 25);
    assert_eq!(c.table_fanout, ChangelogOptions::default().table_fanout);
    let d: DbOptions = serde_json::from_str(r#"{"max_value_bytes": 4096}"#).unwrap();
    assert_eq!(d.max_value_bytes, 4096);
}
