//! Property tests of the `/api/v1/recommendations` query (`?gpus=N&memory_gib=M&exclusive=…`):
//! any query string is a job, no job, or a 400 message, never a panic; a valid job asked
//! in any order and spelling comes back as asked.

use proptest::prelude::*;

use super::job_query;

/// A 400 message: one line, naming what was wrong.
fn is_message(message: &str) -> bool {
    message.ends_with('\n') && message.trim().lines().count() == 1 && !message.trim().is_empty()
}

/// A parameter from the known keys (and a stranger), with a value of any shape.
fn parameter() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["gpus", "memory_gib", "exclusive", "gpu", "", "GPUS"]),
        prop_oneof![
            "\\PC{0,12}",
            "[0-9.eE+-]{0,12}",
            any::<u64>().prop_map(|n| n.to_string()),
            any::<f64>().prop_map(|x| x.to_string()),
        ],
        any::<bool>(),
    )
        .prop_map(|(key, value, with_value)| {
            if with_value {
                format!("{key}={value}")
            } else {
                key.to_string()
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn any_query_is_a_job_none_or_a_message(query in "\\PC{0,64}") {
        if let Err(message) = job_query(Some(&query)) {
            prop_assert!(is_message(&message), "{:?}", message);
        }
    }

    #[test]
    fn any_parameters_are_a_job_none_or_a_message(
        parameters in prop::collection::vec(parameter(), 0..5),
    ) {
        let query = parameters.join("&");
        match job_query(Some(&query)) {
            Ok(Some((gpus, _, _))) => prop_assert!(gpus > 0),
            Ok(None) => {}
            Err(message) => prop_assert!(is_message(&message), "{:?}", message),
        }
    }

    #[test]
    fn valid_jobs_come_back_as_asked(
        gpus in 1usize..100_000,
        tenths in prop::option::of(0u32..10_000_000),
        exclusive in prop::option::of(prop::sample::select(vec![
            ("true", true), ("1", true), ("", true), ("false", false), ("0", false),
        ])),
        order in any::<u8>(),
    ) {
        let mut parameters = vec![format!("gpus={gpus}")];
        let memory_gib = tenths.map(|t| f64::from(t) / 10.0);
        if let Some(m) = memory_gib {
            parameters.push(format!("memory_gib={m}"));
        }
        if let Some((spelling, _)) = exclusive {
            parameters.push(format!("exclusive={spelling}"));
        }
        let turn = usize::from(order) % parameters.len();
        parameters.rotate_left(turn);
        let query = parameters.join("&");
        let expected_bytes = (memory_gib.unwrap_or(0.0) * (1u64 << 30) as f64) as u64;
        prop_assert_eq!(
            job_query(Some(&query)),
            Ok(Some((gpus, expected_bytes, exclusive.is_some_and(|(_, e)| e))))
        );
    }
}
