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
        let _ = parse_value(&body);
    }
}
