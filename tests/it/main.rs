//! Every integration test, in one binary: linking is the slowest step of a test build, and
//! one binary links once. Each file is the module of one subject (`board`, `fleet_limits`,
//! …); `cargo test --test it board::` runs one. The shared support code sits beside them:
//! `common` (the agent under test, the fake NVML library, real servers), and the test
//! kubelet, delivery receivers and deployment helpers.

mod common;
mod delivery_support;
mod deploy_support;
mod kubelet_support;

mod advice;
mod alerting_e2e;
mod alerting_restart;
mod alertmanager_e2e;
mod architecture;
mod board;
mod cli;
mod closed_output;
mod config_agreement;
mod config_props;
mod dashboard_prometheus;
mod dcgm_prometheus;
mod delivery_outage;
mod delivery_restart;
mod delivery_retry_after;
mod delivery_secrets;
mod deploy;
mod deploy_health;
mod deploy_report;
mod detection;
mod exposition;
mod fleet_limits;
mod fleet_replay;
mod fleet_report;
mod ghost;
mod health_cli;
mod health_nvml;
mod health_sim;
mod hpc_jobs;
mod http;
mod kmsg_follow;
mod kmsg_idle;
mod kubelet;
mod kubelet_join;
mod metrics_doc;
mod mig;
mod notify_chat;
mod notify_classify;
mod notify_payloads;
mod notify_retry_after;
mod nvml_binary;
mod nvml_mig;
mod nvml_source;
mod outbox_full_disk;
mod outbox_store;
mod procinfo;
mod prometheus_rules;
mod reader_properties;
mod record;
mod replay;
mod replay_rounds;
mod review;
mod scenarios;
mod state_file_props;
mod state_files;
mod store_client;
mod train;
mod values_rejected;
mod web_config;
