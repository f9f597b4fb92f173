use super::answer::{Answer, Data, parse_value};
use super::*;

#[test]
fn answers_of_each_kind_parse() {
    let vector: Answer<Data> = serde_json::from_str(
        r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"owner":"ml"},"value":[1700000000.5,"3.25"]}]}}"#,
    )
    .expect("vector");
    assert!(
        matches!(vector.data, Some(Data::Vector(ref v)) if v.len() == 1 && v[0].metric["owner"] == "ml")
    );
    let matrix: Answer<Data> = serde_json::from_str(
        r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1700000000,"1"],[1700003600,"NaN"]]}]}}"#,
    )
    .expect("matrix");
    assert!(matches!(matrix.data, Some(Data::Matrix(ref m)) if m[0].values.len() == 2));
    let error: Answer<Data> = serde_json::from_str(
        r#"{"status":"error","errorType":"bad_data","error":"parse error at char 4"}"#,
    )
    .expect("error");
    assert_eq!(error.error.as_deref(), Some("parse error at char 4"));
}

#[test]
fn permits_bound_the_queries_in_flight() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let permits = Permits::new(CONCURRENT);
    let (running, peak) = (AtomicUsize::new(0), AtomicUsize::new(0));
    std::thread::scope(|scope| {
        for _ in 0..12 {
            scope.spawn(|| {
                let _permit = permits.take();
                peak.fetch_max(running.fetch_add(1, SeqCst) + 1, SeqCst);
                std::thread::sleep(Duration::from_millis(30));
                running.fetch_sub(1, SeqCst);
            });
        }
    });
    let peak = peak.into_inner();
    assert!((2..=CONCURRENT).contains(&peak), "{peak} in flight at once");
    assert_eq!(
        *permits.free.lock().expect("lock"),
        CONCURRENT,
        "all returned"
    );
}

#[test]
fn values_parse_as_prometheus_writes_them() {
    assert_eq!(parse_value("1.5").ok(), Some(1.5));
    assert!(parse_value("NaN").is_ok_and(f64::is_nan));
    assert_eq!(parse_value("+Inf").ok(), Some(f64::INFINITY));
    assert!(parse_value("one").is_err());
}

#[test]
fn credentials_never_show_in_debug() {
    let auth = Auth::Basic {
        user: "u".into(),
        password: "hunter2".into(),
    };
    assert!(!format!("{auth:?}").contains("hunter2"));
}

proptest::proptest! {
    #[test]
    fn any_answer_body_parses_or_fails_cleanly(body in ".{0,300}") {
        let _ = serde_json::from_str::<Answer<Data>>(&body);
        let _ = serde_json::from_str::<Answer<Vec<String>>>(&body);
        let _ = serde_json::from_str::<Answer<Vec<std::collections::BTreeMap<String, String>>>>(&body);
        let _ = serde_json::from_str::<Answer<std::collections::BTreeMap<String, String>>>(&body);
        let _ = parse_value(&body);
    }
}

#[test]
fn each_stores_refusal_for_size_is_told_apart() {
    use super::refusal::classify;
    // As the stores word them (Prometheus 2.42, VictoriaMetrics 1.79 as answered in this
    // project's tests; Mimir, Thanos and Cortex from their sources).
    let cases = [
        (
            "query processing would load too many samples into memory in query execution",
            Some(Limit::Samples),
        ),
        (
            "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)",
            Some(Limit::Points),
        ),
        (
            "error when executing query=\"count_over_time(m[2d:1s])\": too many points for the given step=1000, start=1 and end=2: 173103; cannot exceed -search.maxPointsPerTimeseries=30000",
            Some(Limit::Points),
        ),
        (
            "cannot select more than -search.maxSamplesPerQuery=1000 samples; possible solutions: to increase the -search.maxSamplesPerQuery",
            Some(Limit::Samples),
        ),
        (
            "error when searching tsids: the number of matching timeseries exceeds 2; either narrow down the search or increase -search.max* command-line flag values at vmselect",
            Some(Limit::Series),
        ),
        (
            "too long query; got 103 bytes; mustn't exceed `-search.maxQueryLen=60` bytes",
            Some(Limit::Length),
        ),
        (
            "the query exceeded the maximum number of series (limit: 1 series) (err-mimir-max-series-per-query)",
            Some(Limit::Series),
        ),
        (
            "the query exceeded the maximum number of chunks (limit: 11 chunks) (err-mimir-max-chunks-per-query)",
            Some(Limit::Samples),
        ),
        (
            "the query time range exceeds the limit (query length: 745h0m0s, limit: 721h0m0s)",
            Some(Limit::Points),
        ),
        (
            "rpc error: code = Code(422) desc = exceeded series limit: limit 10 violated (got 11)",
            Some(Limit::Series),
        ),
        (
            "query timed out in expression evaluation",
            Some(Limit::Samples),
        ),
        ("1:5: parse error: unexpected end of input", None),
        ("invalid parameter \"start\": cannot parse", None),
    ];
    for (message, limit) in cases {
        assert_eq!(classify(message), limit, "{message}");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
    #[test]
    fn any_error_text_classifies_without_panicking(text in "\\PC{0,400}") {
        let _ = super::refusal::classify(&text);
    }
}
