//! What merging a store's answers costs the report's client: a store on loopback answers a
//! range query of SERIES series (8 a host, dcgm-exporter's labels) in PIECES windows of
//! time, and the client plans, asks, parses and joins them (`fleet::plan`, the path of the
//! report's hourly rows). `bench/merge.sh` runs it at several sizes.
//!
//! usage: merge-cost SERIES [PIECES] [STEPS] [--before]
//!
//! Prints the wall time and peak RSS of the whole path, and the wall time of the join alone
//! (the pieces parsed first, then joined). `--before` also joins the same parsed pieces
//! the way the client did before (each piece's series looked up by comparing label sets
//! with every series so far), for the ratio in the same run.

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta};
use gpu_sentinel::fleet::plan::census::Census;
use gpu_sentinel::fleet::plan::merge::Ranges;
use gpu_sentinel::fleet::plan::{Limits, Planner, Query, Shape};
use gpu_sentinel::fleet::prom::{Client, Endpoint, Series};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize, default: u64| -> anyhow::Result<u64> {
        Ok(match args.get(i).filter(|a| !a.starts_with("--")) {
            Some(text) => text.parse()?,
            None => default,
        })
    };
    let series = number(0, 100_000)?;
    let pieces = number(1, 2)?.max(1);
    let steps = number(2, 24)?.max(pieces);
    let before = args.iter().any(|a| a == "--before");

    let listener = TcpListener::bind("127.0.0.1:0")?;
    let base = format!("http://{}", listener.local_addr()?);
    std::thread::spawn(move || serve(listener, series));

    let client = Client::new(Endpoint {
        base,
        timeout: Duration::from_secs(600),
        ..Endpoint::default()
    });
    let step = Duration::from_secs(3600);
    let start = DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default();
    let end = start + TimeDelta::hours(steps as i64 - 1);
    // Points a series per piece: the plan cuts the steps into PIECES windows.
    let mut limits = Limits::with_max_samples(u64::MAX / 4);
    limits.steps = steps.div_ceil(pieces);
    limits.output_points = u64::MAX;
    let planner = Planner::new(&client, limits, Census::unknown("Hostname"), step);
    let query = Query {
        reads: Vec::new(),
        shape: Shape::Range { step, window: step },
        by_host: false,
        per_series: false,
        text: Box::new(|_| {
            "avg by (Hostname, gpu) (avg_over_time(DCGM_FI_DEV_GPU_UTIL[1h]))".into()
        }),
    };

    let began = Instant::now();
    let merged = planner.range(&query, start, end)?;
    let whole = began.elapsed();
    // The whole path's peak, before the join alone below holds the pieces twice over.
    let whole_rss = peak_rss_mib();
    let points: usize = merged.iter().map(|s| s.points.len()).sum();
    anyhow::ensure!(
        merged.len() as u64 == series && points as u64 == series * steps,
        "merged {} series, {points} points",
        merged.len()
    );
    drop(merged);

    // The join alone, on pieces parsed beforehand.
    let parts: Vec<Vec<Series>> = planner
        .pieces(&query, start, end)
        .iter()
        .map(|p| client.range(&(query.text)(&dummy_part()), p.start, p.end, step))
        .collect::<anyhow::Result<_>>()?;
    let join = {
        let parts = parts.clone();
        let began = Instant::now();
        let mut ranges = Ranges::default();
        for part in parts {
            ranges.add(part);
        }
        let joined = ranges.finish();
        anyhow::ensure!(joined.len() as u64 == series);
        began.elapsed()
    };
    let old = before.then(|| {
        let began = Instant::now();
        let mut all: Vec<Series> = Vec::new();
        for part in parts {
            for piece in part {
                match all.iter_mut().find(|s| s.labels == piece.labels) {
                    Some(s) => s.points.extend(piece.points),
                    None => all.push(piece),
                }
            }
        }
        began.elapsed()
    });
    println!(
        "{series} series × {steps} steps in {pieces} pieces: whole path {:.2} s, peak RSS {whole_rss} MiB; join alone {:.3} s{}",
        whole.as_secs_f64(),
        join.as_secs_f64(),
        old.map(|d| format!(", join as before {:.2} s", d.as_secs_f64()))
            .unwrap_or_default(),
    );
    Ok(())
}

fn dummy_part() -> gpu_sentinel::fleet::plan::Part<'static> {
    gpu_sentinel::fleet::plan::Part {
        hosts: "",
        window: "",
    }
}

/// The process's peak resident set (VmHWM), MiB.
fn peak_rss_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kib| kib.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib / 1024)
}

/// Answers every range query with `series` series, a point at each step asked for,
/// written as it is generated (the answer ends when the connection closes).
fn serve(listener: TcpListener, series: u64) {
    for stream in listener.incoming().flatten() {
        std::thread::spawn(move || {
            let mut reader = BufReader::new(&stream);
            let mut length = 0usize;
            let mut line = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(value) = lower.strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
                if line == "\r\n" {
                    break;
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                return;
            }
            let form = String::from_utf8_lossy(&body).to_string();
            let field = |name: &str| -> f64 {
                form.split('&')
                    .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0.0)
            };
            let (start, end, step) = (field("start"), field("end"), field("step").max(1.0));
            let mut out = BufWriter::with_capacity(1 << 20, &stream);
            let _ = write!(
                out,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{{\"status\":\"success\",\"data\":{{\"resultType\":\"matrix\",\"result\":["
            );
            for i in 0..series {
                let (host, gpu) = (i / 8, i % 8);
                let _ = write!(
                    out,
                    "{}{{\"metric\":{{\"Hostname\":\"node-{host:05}\",\"gpu\":\"{gpu}\",\"UUID\":\"GPU-{i:08x}-bench\",\"modelName\":\"NVIDIA H100 80GB HBM3\",\"pci_bus_id\":\"00000000:{gpu:02X}:00.0\",\"job\":\"dcgm\"}},\"values\":[",
                    if i == 0 { "" } else { "," }
                );
                let mut t = start;
                let mut first = true;
                while t <= end + 1e-6 {
                    let _ = write!(
                        out,
                        "{}[{t},\"{}\"]",
                        if first { "" } else { "," },
                        (i % 100) as f64 / 100.0
                    );
                    first = false;
                    t += step;
                }
                let _ = out.write_all(b"]}");
            }
            let _ = out.write_all(b"]}}");
            let _ = out.flush();
        });
    }
}
