//! `gpu-sentinel run`: collect on a thread, serve on a small async runtime, stop cleanly.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use super::{RunArgs, preflight};
use crate::agent::{Collector, Persistence, StateLock};
use crate::alert::alerting::Alerting;
use crate::alert::outgoing::Outgoing;
use crate::alert::route::Route;
use crate::api::Latest;
use crate::config::Config;
use crate::engine::{Engine, EngineConfig};
use crate::server::{self, ServerState, Transport};
use crate::webconfig::WebConfig;

/// Worker threads of the HTTP runtime. Serving pre-rendered bytes needs little; more
/// threads would only add memory on hosts whose cores belong to the GPUs' jobs.
const HTTP_WORKERS: usize = 2;

pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    // Refused here, with key and line, is everything `check-config` refuses (and unset
    // variables it warns of); after this only a bad command-line override, the machine
    // (NVML) or the network (the listen socket) can stop the start.
    let config = args.source.config_for_run()?;
    let listen = args.listen.unwrap_or(config.export.listen);
    // The flag's file is checked here; the configuration's was checked with the rest.
    let web = match (&args.web_config_file, &config.export.web_config) {
        (Some(flag), _) => Some(WebConfig::load(flag).context("--web.config.file")?),
        (None, Some(path)) => Some(WebConfig::load(path).context("[export] web_config")?),
        (None, None) => None,
    };
    // Builds the dummy bcrypt hash: before the async runtime, and before collecting.
    let transport = Transport::new(web.as_ref());
    Transport::announce(web.as_ref());
    // The soft open-file limit is raised first: every connection is a descriptor.
    let max_connections = server::connection_cap(config.server.max_connections);
    // Open the source first: without NVML there is nothing to serve, and the operator
    // should hear so within seconds, not after the server is up.
    let source = super::sources::open(&config, args.source.simulate)?;
    let options = crate::export::RenderOptions::from_config(&config);
    let external_url = format!(
        "{}://{}:{}/api/v1/alerts",
        transport.scheme(),
        options.hostname,
        listen.port()
    );
    // Simulated fleets start afresh each run: their clock restarts, so remembered
    // windows and alerts would describe another timeline.
    let state_dir = if args.source.simulate {
        None
    } else {
        usable_state_dir(&config.state.dir)
    };
    // Before anything opens a file there: a second agent on the directory stops here.
    let _state_lock = state_dir.as_deref().map(StateLock::acquire).transpose()?;
    let Parts {
        engine,
        alerting,
        outgoing,
    } = Parts::build(
        &config,
        &preflight::process_env,
        state_dir.as_deref(),
        options.hostname.clone(),
        external_url,
    )?;
    let persistence = state_dir.map(|dir| Persistence {
        dir,
        save_every: config.state.save_interval,
    });
    let delivery = outgoing.delivery_health();
    let latest = Arc::new(Latest::default());
    let collector = Collector::new(
        source,
        engine,
        alerting,
        outgoing,
        persistence,
        options,
        latest.clone(),
    )
    .with_teams(config.teams.clone());
    let state = Arc::new(ServerState {
        latest,
        source: collector.describe(),
        version: env!("CARGO_PKG_VERSION"),
        started: std::time::Instant::now(),
        // Three missed collections, and never less than ten seconds: a slow call is not yet
        // a dead agent.
        stale_after: (config.collect.interval * 3).max(Duration::from_secs(10)),
        delivery,
    });

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(HTTP_WORKERS)
        .enable_all()
        .thread_name("http")
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let listener = server::bind(listen).await?;
        tracing::info!(
            "serving {}://{} from {}",
            transport.scheme(),
            listener.local_addr().unwrap_or(listen),
            state.source
        );
        let (stop_collector, stop_rx) = std::sync::mpsc::channel();
        let collector = collector
            .spawn(config.collect.interval, stop_rx)
            .context("cannot start the collector thread")?;
        let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(server::serve(
            listener,
            state,
            transport,
            max_connections,
            shutdown_rx,
        ));
        wait_for_signal().await;
        tracing::info!("shutting down");
        let _ = shutdown_tx.send(true);
        drop(stop_collector);
        let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
        // A collection stuck in a driver call cannot be interrupted; don't wait on it forever.
        let joined = tokio::task::spawn_blocking(move || collector.join());
        if tokio::time::timeout(Duration::from_secs(5), joined)
            .await
            .is_err()
        {
            tracing::warn!("the collector is stuck in a call; exiting without it");
        }
        anyhow::Ok(())
    })
}

/// What `run` builds from a configuration before anything is served: the engine (with its
/// risk model), the alert rules and routing, and delivery with its notifiers and advisor.
/// Delivery and advice threads start here and stop when the parts are dropped.
pub struct Parts {
    pub engine: Engine,
    pub alerting: Alerting,
    pub outgoing: Outgoing,
}

impl Parts {
    /// Builds every part; `env` reads the variables `*_env` options name. Everything that
    /// can refuse a configuration here is also run by [`preflight::check`], which `run`
    /// passes first, so an error here means the two drifted apart.
    pub fn build(
        config: &Config,
        env: &preflight::Env<'_>,
        state_dir: Option<&std::path::Path>,
        hostname: String,
        external_url: String,
    ) -> anyhow::Result<Parts> {
        let engine = Engine::new(EngineConfig::from_config(config)?);
        // Compiled once: dispatch and the advice digest follow the same tree.
        let route = Route::compile(&config.alerting.route)
            .map(Arc::new)
            .context("alerting")?;
        let alerting =
            Alerting::with_route(config, Arc::clone(&route), hostname.clone(), external_url)
                .context("alerting")?;
        let outgoing = Outgoing::from_config(config, route, state_dir, hostname, env)?;
        Ok(Parts {
            engine,
            alerting,
            outgoing,
        })
    }
}

/// The state directory, if it can be used. One that cannot be created is not fatal: the
/// agent runs, forgetting on restart.
fn usable_state_dir(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    match std::fs::create_dir_all(dir) {
        Ok(()) => Some(dir.to_path_buf()),
        Err(e) => {
            tracing::warn!(
                "state directory {} is unusable ({e}); analysis state will not survive a restart \
                 (set [state] dir)",
                dir.display()
            );
            None
        }
    }
}

/// Resolves on SIGINT or SIGTERM (what Kubernetes and systemd send).
async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
