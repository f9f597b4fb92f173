//! The fleet commands against a store that misbehaves, through the real binary and the
//! tests' loopback HTTP server in the store's place: one that never answers costs the
//! query's `--timeout` once (not once per retry); one that sends hundreds of megabytes fails
//! that query with a clear message and leaves the process small; values that are not finite
//! numbers (or past ±1e18) are dropped with a warning naming the series, and never reach the
//! output of `review` or `report`.
//!
//! The child that reads the large answer has its own peak memory read from /proc while it
//! runs (`run_with_peak`).

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::http_server::{Answer, HttpServer, Step};
use common::run;

/// The store's answer to an instant query: a vector of (labels, value) as Prometheus
/// writes them (values as strings).
fn vector(rows: &[(&[(&str, &str)], &str)]) -> String {
    let result: Vec<serde_json::Value> = rows
        .iter()
        .map(|(labels, value)| {
            let metric: serde_json::Map<String, serde_json::Value> = labels
                .iter()
                .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
                .collect();
            serde_json::json!({"metric": metric, "value": [1_700_000_000.0, value]})
        })
        .collect();
    serde_json::json!({"status": "success", "data": {"resultType": "vector", "result": result}})
        .to_string()
}

/// A range answer of about `bytes`: many series of many points.
fn huge_matrix(bytes: usize) -> String {
    let mut body = String::with_capacity(bytes + 4096);
    body.push_str(r#"{"status":"success","data":{"resultType":"matrix","result":["#);
    let points: String = (0..1000)
        .map(|i| format!("[{},\"0.5\"]", 1_700_000_000 + i * 60))
        .collect::<Vec<_>>()
        .join(",");
    let mut n = 0;
    while body.len() < bytes {
        if n > 0 {
            body.push(',');
        }
        body.push_str(&format!(
            r#"{{"metric":{{"Hostname":"h{n}","gpu":"0","UUID":"GPU-{n}"}},"values":[{points}]}}"#
        ));
        n += 1;
    }
    body.push_str("]}}");
    body
}

/// Runs the binary to completion with `args`: its exit status, its stderr (stdout is
/// dropped) and its own peak resident memory in MB, read from its `VmHWM` while it runs.
/// Neither `getrusage` nor `wait4` can say it: a child spawned with vfork (as
/// `posix_spawn` does) is charged the test process's own peak at its exec, and this test
/// process holds the 200 MB answer and runs other subjects' tests beside it.
fn run_with_peak(args: &[&str]) -> (std::process::ExitStatus, String, u64) {
    let stderr_path = std::env::temp_dir().join(format!(
        "gpu-sentinel-store-client-{}.stderr",
        std::process::id()
    ));
    let stderr_file = std::fs::File::create(&stderr_path).expect("stderr file");
    let mut child = std::process::Command::new(common::binary())
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(stderr_file)
        .spawn()
        .expect("the gpu-sentinel binary runs");
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak_kb = 0;
    let status = loop {
        // The high-water mark only grows; the last reading before the exit is the peak
        // but for what the last few milliseconds added.
        let hwm = std::fs::read_to_string(&status_file).ok().and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        });
        peak_kb = peak_kb.max(hwm.unwrap_or(0));
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break status;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let _ = std::fs::remove_file(&stderr_path);
    assert!(peak_kb > 0, "the child's memory was never read");
    (status, stderr, peak_kb / 1024)
}

#[test]
fn a_misbehaving_store_costs_one_timeout_bounded_memory_and_no_non_finite_values() {
    // Values that are not numbers: dropped, counted and named; the finite ones stay.
    let store = HttpServer::answering(|request| {
        let body = String::from_utf8_lossy(&request.body).into_owned();
        let rows: Vec<(Vec<(&str, &str)>, &str)> = if body.contains("gpu_failure_risk_score") {
            vec![
                (
                    vec![
                        ("instance", "dgx-1:10400"),
                        ("gpu", "0"),
                        ("uuid", "GPU-NAN"),
                    ],
                    "NaN",
                ),
                (
                    vec![
                        ("instance", "dgx-1:10400"),
                        ("gpu", "1"),
                        ("uuid", "GPU-INF"),
                    ],
                    "+Inf",
                ),
                (
                    vec![
                        ("instance", "dgx-1:10400"),
                        ("gpu", "2"),
                        ("uuid", "GPU-FINE"),
                    ],
                    "0.25",
                ),
            ]
        } else if body.contains("gpu_temperature_celsius") {
            vec![(
                vec![
                    ("instance", "dgx-1:10400"),
                    ("gpu", "2"),
                    ("uuid", "GPU-FINE"),
                ],
                "-Inf",
            )]
        } else {
            Vec::new()
        };
        let rows: Vec<(&[(&str, &str)], &str)> =
            rows.iter().map(|(l, v)| (l.as_slice(), *v)).collect();
        Answer::json(200, &vector(&rows))
    });
    let out = run(&["review", "--prometheus", &store.url(""), "--timeout", "10s"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("GPU-FINE"), "{stdout}");
    for bad in ["NaN", "inf", "1e+308", "1e308"] {
        assert!(
            !stdout.to_lowercase().contains(&bad.to_lowercase()),
            "{bad} reached the output:\n{stdout}"
        );
    }
    assert!(
        stderr.contains("dropped 2 value(s)") && stderr.contains("GPU-NAN"),
        "the warning counts the values and names the first series:\n{stderr}"
    );
    assert!(stderr.contains("dropped 1 value(s)"), "{stderr}");
    drop(store);

    // A store that accepts and never answers: one deadline for the query and its retries.
    let silent = HttpServer::answering(|_| Answer::raw(vec![Step::Sleep(Duration::from_secs(60))]));
    let began = Instant::now();
    let out = run(&["review", "--prometheus", &silent.url(""), "--timeout", "2s"]);
    let took = began.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        took < Duration::from_secs(5),
        "a 2 s timeout took {took:?} (retries stacked):\n{stderr}"
    );
    assert!(stderr.contains("timeout of 2s"), "{stderr}");
    drop(silent);

    // A store that answers a range query with 200 MB: that query fails naming the cap, and
    // the process never holds the answer (the old client read it whole, four at a time).
    let huge = Arc::new(huge_matrix(200 << 20));
    let store = HttpServer::answering(move |request| {
        if request.target.starts_with("/api/v1/label/__name__/values") {
            Answer::json(
                200,
                r#"{"status":"success","data":["DCGM_FI_DEV_GPU_UTIL","DCGM_FI_DEV_FB_USED"]}"#,
            )
        } else if request.target.starts_with("/api/v1/query_range") {
            Answer::json(200, &huge)
        } else {
            Answer::json(200, &vector(&[]))
        }
    });
    let (status, stderr, peak) = run_with_peak(&[
        "report",
        "--prometheus",
        &store.url(""),
        "--last",
        "1d",
        "--format",
        "json",
        "--timeout",
        "60s",
        // A cap below the default: an unoptimised build parses a megabyte or two a second,
        // too slowly to pass 128 MB within the timeout.
        "--max-answer-mb",
        "16",
    ]);
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("answers in flight passed 16 MB"),
        "the error names the cap:\n{stderr}"
    );
    eprintln!("the report's peak memory reading a 200 MB answer: {peak} MB");
    assert!(
        peak < 400,
        "the report peaked at {peak} MB reading a 200 MB answer"
    );
}

/// The five GPUs of [`hostile_store`] and what each family's series of them holds: one
/// ordinary value, and the values a broken exporter or a query dividing by zero produce.
const HOSTILE: [(&str, &str); 5] = [
    ("GPU-FINE", ""),
    ("GPU-NAN", "NaN"),
    ("GPU-PINF", "+Inf"),
    ("GPU-NINF", "-Inf"),
    ("GPU-HUGE", "1e308"),
];

/// The family a query reads, named by the first of these it mentions, and the ordinary
/// value of it the store answers for GPU-FINE.
fn family_of(query: &str) -> Option<(&'static str, &'static str)> {
    [
        ("gpu_failure_risk", "0.8"),
        ("gpu_owner_seconds_total", "3600"),
        ("gpu_power_watts", "300"),
        ("gpu_utilization_ratio", "0.5"),
    ]
    .into_iter()
    .find(|(family, _)| query.contains(family))
}

/// A store answering gpu-sentinel's families for one host of five GPUs, every query of the
/// utilization, power, owner and risk series with a row per GPU: GPU-FINE's value is
/// ordinary, the others' are NaN, +Inf, -Inf and 1e308.
fn hostile_store() -> HttpServer {
    HttpServer::answering(|request| {
        let path = request.path().to_string();
        let form = request.text();
        let param = |name: &str| {
            request.query(name).or_else(|| {
                form.split('&').find_map(|pair| {
                    let (k, v) = pair.split_once('=')?;
                    (k == name).then(|| v.to_string())
                })
            })
        };
        let query = param("query")
            .or_else(|| param("match[]"))
            .map(|q| q.replace("%22", "\"").replace("%7C", "|"))
            .unwrap_or_default();
        let success = |data: serde_json::Value| {
            Answer::json(
                200,
                &serde_json::json!({"status": "success", "data": data}).to_string(),
            )
        };
        let labels = |uuid: &str, i: usize| {
            serde_json::json!({
                "instance": "dgx-1:10400", "hostname": "dgx-1", "gpu": i.to_string(),
                "uuid": uuid, "owner": "ml-train", "state": "busy", "feature": "ecc_rate",
            })
        };
        match path.as_str() {
            "/api/v1/label/__name__/values" => success(serde_json::json!([
                "gpu_utilization_ratio",
                "gpu_owner_seconds_total",
                "gpu_power_watts",
                "gpu_failure_risk_score",
                "gpu_failure_risk_contribution"
            ])),
            "/api/v1/label/instance/values" => success(serde_json::json!(["dgx-1:10400"])),
            // The index lists what the queries answer: each family's series of each GPU.
            "/api/v1/series" => success(
                [
                    "gpu_utilization_ratio",
                    "gpu_owner_seconds_total",
                    "gpu_power_watts",
                    "gpu_failure_risk_score",
                    "gpu_failure_risk_contribution",
                ]
                .iter()
                .flat_map(|family| {
                    HOSTILE.iter().enumerate().map(move |(i, (uuid, _))| {
                        let mut series = labels(uuid, i);
                        series["__name__"] = serde_json::json!(family);
                        series
                    })
                })
                .collect(),
            ),
            "/api/v1/status/flags" => success(serde_json::json!({})),
            "/api/v1/query" | "/api/v1/query_range" => {
                let Some((_, fine)) = family_of(&query) else {
                    let kind = if path.ends_with("range") {
                        "matrix"
                    } else {
                        "vector"
                    };
                    return success(serde_json::json!({"resultType": kind, "result": []}));
                };
                let value = |v: &str| {
                    if v.is_empty() {
                        fine.to_string()
                    } else {
                        v.to_string()
                    }
                };
                if path.ends_with("range") {
                    let number = |name: &str| {
                        param(name)
                            .and_then(|v| v.parse::<f64>().ok())
                            .unwrap_or(0.0)
                    };
                    let (start, end, step) = (number("start"), number("end"), number("step"));
                    let step = step.max((end - start) / 200.0).max(1.0);
                    let times: Vec<f64> = (0..)
                        .map(|i| start + step * f64::from(i))
                        .take_while(|t| *t <= end)
                        .collect();
                    let result: Vec<serde_json::Value> = HOSTILE
                        .iter()
                        .enumerate()
                        .map(|(i, (uuid, v))| {
                            let points: Vec<serde_json::Value> = times
                                .iter()
                                .map(|t| serde_json::json!([t, value(v)]))
                                .collect();
                            serde_json::json!({"metric": labels(uuid, i), "values": points})
                        })
                        .collect();
                    success(serde_json::json!({"resultType": "matrix", "result": result}))
                } else {
                    let at = param("time")
                        .and_then(|v| v.parse::<f64>().ok())
                        .unwrap_or(1.7e9);
                    let result: Vec<serde_json::Value> = HOSTILE
                        .iter()
                        .enumerate()
                        .map(|(i, (uuid, v))| {
                            serde_json::json!({"metric": labels(uuid, i), "value": [at, value(v)]})
                        })
                        .collect();
                    success(serde_json::json!({"resultType": "vector", "result": result}))
                }
            }
            _ => Answer::json(
                404,
                r#"{"status":"error","errorType":"not_found","error":"no such endpoint"}"#,
            ),
        }
    })
}

/// Words and numbers of `text` that are not finite or ordinary figures: `NaN`, `inf`,
/// `1e+308` and any number past ±1e18.
fn non_finite_words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '-')))
        .filter(|word| {
            let lower = word.to_ascii_lowercase();
            let lower = lower.trim_start_matches(['+', '-']);
            matches!(lower, "nan" | "inf" | "infinity")
                || lower.parse::<f64>().is_ok_and(|v| v.abs() > 1e18)
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn the_report_from_a_store_of_nan_infinities_and_1e308_shows_none_of_them() {
    let store = hostile_store();
    for format in ["json", "markdown"] {
        let out = run(&[
            "report",
            "--prometheus",
            &store.url(""),
            "--last",
            "1d",
            "--format",
            format,
            "--timeout",
            "20s",
        ]);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{format}:\n{stdout}\n{stderr}");
        let bad = non_finite_words(&stdout);
        assert!(
            bad.is_empty(),
            "{format}: {bad:?} reached the output:\n{stdout}"
        );
        // Each family's nonsense is named in a warning with its query and first series.
        for family in [
            "gpu_utilization_ratio",
            "gpu_power_watts",
            "gpu_owner_seconds_total",
            "gpu_failure_risk_score",
        ] {
            assert!(
                stderr.lines().any(|l| l.contains(family)
                    && l.contains("dropped")
                    && l.contains("uuid=\"GPU-NAN\"")),
                "{format}: no warning names {family}'s series:\n{stderr}"
            );
        }
        // NaN, both infinities and 1e308 of the four risk scores.
        assert!(
            stderr.lines().any(
                |l| l.contains("topk(10, last_over_time(gpu_failure_risk_score")
                    && l.contains("dropped 4 value(s)")
            ),
            "{format}: the risk scores' four values are not all dropped:\n{stderr}"
        );
        if format == "json" {
            // The ordinary GPU's figures stay.
            let doc: serde_json::Value = serde_json::from_str(&stdout).expect("the report's JSON");
            let fleet = &doc["fleet"];
            assert_eq!(fleet["gpus"], 1, "{fleet}");
            assert_eq!(fleet["utilization"], 0.5, "{fleet}");
            let risk = fleet["risk"].as_array().expect("a risk table");
            assert_eq!(risk.len(), 1, "{fleet}");
            assert_eq!(risk[0]["uuid"], "GPU-FINE");
            assert_eq!(risk[0]["risk"], 0.8);
        } else {
            assert!(stdout.contains("demand 0.5 GPUs"), "{stdout}");
        }
    }
}
