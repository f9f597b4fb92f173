//! A receiver that answers 429 with an absurd `Retry-After`, through the real binary (fake
//! NVML, a GPU lost after a second): `Retry-After: 18446744073709551615` once killed the
//! receiver's delivery thread (`overflow when adding duration to instant`) and an
//! HTTP-date in 2099 scheduled the retry 73 years out. Now the wait is cut to the receiver's
//! `max_backoff`, counted, and the notification delivered once the receiver answers 200 —
//! no panic, `/healthz` healthy throughout.

use crate::common;

use std::time::{Duration, Instant};

use common::http_server::{Answer, HttpServer};
use common::{Agent, fake_nvml_lib, samples, temp_file};

/// Starts an agent whose receiver "ops" (a webhook at `hook`, `max_backoff = "2s"`) gets
/// GpuLost within a few seconds.
fn agent(name: &str, hook: &HttpServer) -> Agent {
    let scenario = temp_file(
        &format!("{name}-scenario.toml"),
        "[simulation]\ngpus = 2\nfaults = []\n[[fault]]\ngpu = 1\nfunction = \"*\"\nerror = \"GPU_IS_LOST\"\nafter_seconds = 1.0\n",
    );
    let state = std::env::temp_dir().join(format!("gs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let config = temp_file(
        &format!("{name}.toml"),
        &format!(
            "[collect]\ninterval = \"200ms\"\nkmsg = \"off\"\n[state]\ndir = \"{}\"\n\
             [[alerting.receivers]]\nname = \"ops\"\nkind = \"webhook\"\nurl = \"{}\"\n\
             max_backoff = \"2s\"\n\
             [alerting.route]\nreceiver = \"ops\"\ngroup_wait = \"0s\"\n",
            state.display(),
            hook.url("/hook")
        ),
    );
    let lib = fake_nvml_lib();
    Agent::start(
        &[
            "--nvml-lib",
            lib.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ],
        &[("FAKE_NVML_SCENARIO", scenario.to_str().unwrap())],
    )
}

/// The receiver first answers 429 asking for `retry_after`, then 200: the refused
/// notification arrives again within the cap (2 s, +20% jitter), is counted as capped, and
/// nothing panics.
fn retried_within_the_cap(name: &str, retry_after: &str) {
    let hook = HttpServer::start(vec![
        Answer::status(429).header("Retry-After", retry_after),
        Answer::ok(),
    ]);
    let agent = agent(name, &hook);
    let refused = hook.wait_for(1, Duration::from_secs(30));
    let refused_at = Instant::now();
    assert!(
        refused[0].text().contains("GpuLost"),
        "{}",
        refused[0].text()
    );
    let group = refused[0].json()["groupKey"].clone();
    // Retried: the same group again, accepted this time.
    let began = Instant::now();
    let retried = loop {
        let again = hook
            .requests()
            .into_iter()
            .skip(1)
            .find(|r| r.json()["groupKey"] == group);
        if let Some(r) = again {
            break r;
        }
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "Retry-After {retry_after}: not retried within 10 s (cap 2 s)"
        );
        assert_eq!(
            agent.get("/healthz").status,
            200,
            "{}",
            agent.get("/healthz").text()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let gap = refused_at.elapsed();
    assert!(gap < Duration::from_secs(5), "retried after {gap:?}");
    assert!(retried.text().contains("GpuLost"));
    // Delivered: the outbox drains.
    agent.wait_until(Duration::from_secs(10), |a| {
        samples(&a.get("/metrics").text(), "gpu_sentinel_outbox_pending") == vec![("", 0.0)]
    });
    let metrics = agent.get("/metrics").text();
    assert_eq!(
        samples(&metrics, "gpu_sentinel_delivery_retry_after_capped_total"),
        vec![("receiver=\"ops\"", 1.0)],
        "the cut wait is counted"
    );
    assert_eq!(
        samples(&metrics, "gpu_sentinel_delivery_worker_restarts_total"),
        vec![("receiver=\"ops\"", 0.0)]
    );
    let health = agent.get("/healthz");
    assert_eq!(health.status, 200, "{}", health.text());
    let (_, stderr) = agent.stop();
    assert!(
        !stderr.contains("panicked") && !stderr.contains("overflow"),
        "{stderr}"
    );
    assert!(
        stderr.contains("max_backoff"),
        "the cut is logged: {stderr}"
    );
}

#[test]
fn retry_after_of_two_to_the_sixty_four_seconds_is_a_retry_within_max_backoff() {
    retried_within_the_cap("retry-after-huge", "18446744073709551615");
}

#[test]
fn retry_after_of_a_date_in_2099_is_a_retry_within_max_backoff() {
    retried_within_the_cap("retry-after-2099", "Thu, 01 Jan 2099 00:00:00 GMT");
}
