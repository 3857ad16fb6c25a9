//! The job record codec: round trip, and a typed error for every kind of damage.

use proptest::prelude::*;
use sst_format::{
    decode_job_checkpoint, encode_job_checkpoint, Error, JobCheckpoint, OperatorListState,
    RedistributionMode, TaskCheckpoint,
};

fn sample() -> JobCheckpoint {
    JobCheckpoint {
        checkpoint_id: 12,
        job_name: "freqcap".into(),
        max_parallelism: 128,
        triggered_at_ms: 1_700_000_000_000,
        completed_at_ms: 1_700_000_000_250,
        tasks: vec![
            TaskCheckpoint {
                task: 0,
                manifest: Some("chk-12/00ff/_metadata".into()),
                key_group_start: 0,
                key_group_end: 63,
                operator_state: vec![OperatorListState {
                    name: "offsets".into(),
                    mode: RedistributionMode::Split,
                    elements: vec![vec![1, 2, 3]],
                }],
                state_bytes: 4096,
                bytes_uploaded: 1024,
                files_reused: 3,
                sync_micros: 1500,
                async_micros: 30_000,
            },
            TaskCheckpoint {
                task: 1,
                manifest: None,
                key_group_start: 0,
                key_group_end: 0,
                operator_state: vec![],
                state_bytes: 0,
                bytes_uploaded: 0,
                files_reused: 0,
                sync_micros: 0,
                async_micros: 0,
            },
        ],
    }
}

#[test]
fn round_trip_and_layout() {
    let r = sample();
    let b = encode_job_checkpoint(&r).unwrap();
    assert_eq!(&b[..4], b"RSJC");
    assert_eq!(&b[4..6], &[1, 0]);
    let n = u32::from_le_bytes(b[6..10].try_into().unwrap()) as usize;
    assert_eq!(b.len(), 14 + n);
    let crc = u32::from_le_bytes(b[10 + n..].try_into().unwrap());
    assert_eq!(crc, crc32fast::hash(&b[10..10 + n]));
    assert_eq!(decode_job_checkpoint(&b).unwrap(), r);
    // The body is plain postcard: the first byte is the checkpoint id varint.
    assert_eq!(b[10], 12);
}

#[test]
fn damage_is_a_typed_error() {
    let b = encode_job_checkpoint(&sample()).unwrap();
    let mut bad_magic = b.clone();
    bad_magic[0] = b'X';
    assert!(matches!(
        decode_job_checkpoint(&bad_magic),
        Err(Error::BadMagic { .. })
    ));
    let mut v2 = b.clone();
    v2[4] = 2;
    assert!(matches!(
        decode_job_checkpoint(&v2),
        Err(Error::UnknownVersion { version: 2, .. })
    ));
    for cut in [0, 3, 5, 9, 10, b.len() - 1] {
        let r = decode_job_checkpoint(&b[..cut]);
        assert!(
            matches!(r, Err(Error::Truncated { .. })),
            "cut {cut}: {r:?}"
        );
    }
    let mut trailing = b.clone();
    trailing.push(0);
    assert!(matches!(
        decode_job_checkpoint(&trailing),
        Err(Error::Corrupt { .. })
    ));
    let mut flipped = b.clone();
    flipped[12] ^= 0x40;
    assert!(matches!(
        decode_job_checkpoint(&flipped),
        Err(Error::RecordChecksum { .. })
    ));
    let mut huge = b.clone();
    huge[6..10].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        decode_job_checkpoint(&huge),
        Err(Error::TooLarge { .. })
    ));
    // A body with a valid CRC that is not a JobCheckpoint.
    let body = [0xffu8; 3];
    let mut forged = b"RSJC\x01\x00".to_vec();
    forged.extend_from_slice(&3u32.to_le_bytes());
    forged.extend_from_slice(&body);
    forged.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    assert!(matches!(
        decode_job_checkpoint(&forged),
        Err(Error::Decode(_))
    ));
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode_job_checkpoint(&data);
        let mut framed = b"RSJC\x01\x00".to_vec();
        framed.extend_from_slice(&(data.len() as u32).to_le_bytes());
        framed.extend_from_slice(&data);
        framed.extend_from_slice(&crc32fast::hash(&data).to_le_bytes());
        if let Ok(r) = decode_job_checkpoint(&framed) {
            let again = encode_job_checkpoint(&r).unwrap();
            prop_assert_eq!(decode_job_checkpoint(&again).unwrap(), r);
        }
    }
}

/// Writes the fuzz seeds when `ROCKSTATE_WRITE_SEEDS=1` (they are committed under
/// `fuzz/corpus/job_record_decode/`); otherwise checks that the committed ones still match.
#[test]
fn fuzz_seeds_match_the_encoder() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/job_record_decode");
    let good = encode_job_checkpoint(&sample()).unwrap();
    let mut empty = sample();
    empty.tasks.clear();
    let mut crc = good.clone();
    crc[12] ^= 1;
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        ("v1_sample.rsjc", good.clone()),
        ("v1_no_tasks.rsjc", encode_job_checkpoint(&empty).unwrap()),
        ("err_truncated.rsjc", good[..good.len() / 2].to_vec()),
        ("err_bad_crc.rsjc", crc),
        (
            "v1_void.rsjv",
            sst_format::encode_void_record(&sst_format::VoidRecord {
                checkpoint_id: 7,
                voided_at_ms: 1_700_000_000_000,
            }),
        ),
    ];
    for (name, bytes) in seeds {
        let path = dir.join(name);
        if std::env::var_os("ROCKSTATE_WRITE_SEEDS").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &bytes).unwrap();
        }
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{name}");
    }
}

#[test]
fn void_record_round_trip_and_layout() {
    use sst_format::{decode_job_record, decode_void_record, encode_void_record, JobRecord};
    let v = sst_format::VoidRecord {
        checkpoint_id: 0x0102_0304_0506_0708,
        voided_at_ms: 1_700_000_000_123,
    };
    let b = encode_void_record(&v);
    assert_eq!(b.len(), sst_format::VOID_RECORD_LEN);
    assert_eq!(&b[..4], b"RSJV");
    assert_eq!(&b[4..6], &[1, 0]);
    assert_eq!(&b[6..14], &v.checkpoint_id.to_le_bytes());
    assert_eq!(&b[14..22], &v.voided_at_ms.to_le_bytes());
    assert_eq!(&b[22..], &crc32fast::hash(&b[..22]).to_le_bytes());
    assert_eq!(decode_void_record(&b).unwrap(), v);
    assert_eq!(decode_job_record(&b).unwrap(), JobRecord::Void(v));
    // Each decoder refuses the other's file by its magic.
    assert!(matches!(
        decode_job_checkpoint(&b),
        Err(Error::BadMagic { .. })
    ));
    let record = encode_job_checkpoint(&sample()).unwrap();
    assert!(matches!(
        decode_void_record(&record),
        Err(Error::BadMagic { .. })
    ));
    assert_eq!(
        decode_job_record(&record).unwrap(),
        JobRecord::Checkpoint(sample())
    );
}

#[test]
fn void_record_damage_is_a_typed_error() {
    use sst_format::{decode_job_record, encode_void_record};
    let b = encode_void_record(&sst_format::VoidRecord {
        checkpoint_id: 9,
        voided_at_ms: 5,
    });
    for cut in 0..b.len() {
        assert!(
            matches!(
                decode_job_record(&b[..cut]),
                Err(Error::Truncated { .. } | Error::BadMagic { .. })
            ),
            "cut at {cut}"
        );
    }
    let mut longer = b.clone();
    longer.push(0);
    assert!(matches!(
        decode_job_record(&longer),
        Err(Error::Corrupt { .. })
    ));
    let mut version = b.clone();
    version[4] = 2;
    assert!(matches!(
        decode_job_record(&version),
        Err(Error::UnknownVersion { version: 2, .. })
    ));
    for i in 6..b.len() {
        let mut flipped = b.clone();
        flipped[i] ^= 0x10;
        assert!(
            matches!(
                decode_job_record(&flipped),
                Err(Error::RecordChecksum { .. })
            ),
            "byte {i}"
        );
    }
}
