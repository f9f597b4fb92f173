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

#[test]
fn the_cap_on_answers_in_flight_is_shared_by_the_answers() {
    use super::answer::Budgeted;
    use std::io::Read;
    // Two answers of 60% of the cap each: either fits alone, both together do not.
    let cap = 1000;
    let reading = AtomicUsize::new(0);
    let budgeted = |bytes: usize| Budgeted {
        inner: std::io::Cursor::new(vec![b' '; bytes]),
        reading: &reading,
        budget: cap,
        read: 0,
        start: Vec::new(),
        over: None,
    };
    let mut first = budgeted(600);
    let mut held = Vec::new();
    first
        .read_to_end(&mut held)
        .expect("60% of the cap alone fits");
    assert_eq!(held.len(), 600);
    let mut second = budgeted(600);
    let crossed = second.read_to_end(&mut Vec::new());
    assert!(crossed.is_err(), "two answers of 60% each passed the cap");
    assert_eq!(
        second.over,
        Some(600),
        "the other answer's bytes are counted when it crosses"
    );
    drop(second);
    drop(first);
    assert_eq!(
        reading.load(Ordering::Relaxed),
        0,
        "each answer gives its bytes back"
    );
    let mut third = budgeted(600);
    third
        .read_to_end(&mut Vec::new())
        .expect("once the others are done, 60% fits again");
}

/// A loopback store for [`the_cap_is_shared_by_queries_in_flight`]: each connection gets a
/// valid empty vector answer behind `padding` bytes of JSON whitespace; the first one
/// accepted sends its padding and then holds the rest for `hold`.
fn padded_store(padding: usize, hold: Duration) -> String {
    use std::io::{BufRead, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = listener.local_addr().expect("local address");
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(stream) = stream else { return };
            std::thread::spawn(move || {
                let mut reader = std::io::BufReader::new(&stream);
                let mut length = 0;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let lower = line.to_ascii_lowercase();
                    if let Some(v) = lower.strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0; length];
                if std::io::Read::read_exact(&mut reader, &mut body).is_err() {
                    return;
                }
                let json = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
                let mut out = &stream;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    padding + json.len()
                );
                let _ = out.write_all(head.as_bytes());
                let _ = out.write_all(&vec![b' '; padding]);
                let _ = out.flush();
                if n == 0 {
                    std::thread::sleep(hold);
                }
                let _ = out.write_all(json.as_bytes());
            });
        }
    });
    format!("http://{addr}")
}

#[test]
fn the_cap_is_shared_by_queries_in_flight() {
    // A cap of 1 MB and answers of 60% of it: the first is held open by the store past its
    // timeout, so the second crosses the cap beside it (and again on its retry) and fails
    // saying so; once the first is gone, the same answer alone passes.
    let padding = 600 << 10;
    let base = padded_store(padding, Duration::from_secs(4));
    // The second query's retry comes a second after its first attempt, within its
    // deadline and the first's; the one after would pass its deadline and is not made.
    let client = Client::new(Endpoint {
        base,
        auth: Auth::None,
        timeout: Duration::from_millis(2500),
    })
    .with_answer_budget(1 << 20);
    let at = Utc::now();
    std::thread::scope(|scope| {
        let held = scope.spawn(|| client.instant("held", at));
        std::thread::sleep(Duration::from_millis(100));
        let beside = client.instant("beside", at);
        let error = format!(
            "{:#}",
            beside.expect_err("two answers of 60% each passed the cap")
        );
        assert!(
            error.contains("the answers in flight passed 1 MB")
                && error.contains("crossed it beside other answers"),
            "{error}"
        );
        assert!(
            held.join().expect("the held query's thread").is_err(),
            "the held answer ends past the timeout"
        );
    });
    assert_eq!(
        client.sent(),
        3,
        "the held query once, the other and its retry"
    );
    assert_eq!(client.reading.load(Ordering::Relaxed), 0);
    client
        .instant("alone", at)
        .expect("the same answer alone fits the cap");
}
