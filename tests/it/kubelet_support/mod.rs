//! A test kubelet: the PodResources API (`v1.PodResourcesLister/List`) served by tonic on a
//! Unix socket, with the same prost messages the agent decodes, and sockets that fail the
//! ways a real one does (nothing there, refusing, hanging).
#![allow(dead_code)] // each test uses a different part

use std::convert::Infallible;
use std::os::unix::net::UnixListener as StdUnixListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use gpu_sentinel::source::kubelet::proto::{
    ContainerDevices, ContainerResources, LIST_PATH, ListPodResourcesRequest,
    ListPodResourcesResponse, PodResources,
};
use hyper::http;
use tokio::sync::oneshot;
use tonic::body::Body;

/// A running PodResources server; stops and removes its socket when dropped.
pub struct PodResourcesServer {
    pub socket: PathBuf,
    answer: Arc<Mutex<ListPodResourcesResponse>>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl PodResourcesServer {
    /// Serves `answer` on a new socket at `socket`.
    pub fn start(socket: &Path, answer: ListPodResourcesResponse) -> PodResourcesServer {
        let _ = std::fs::remove_file(socket);
        let answer = Arc::new(Mutex::new(answer));
        let (stop, stopped) = oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let shared = Arc::clone(&answer);
        let path = socket.to_owned();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a test runtime");
            runtime.block_on(async move {
                let listener = tokio::net::UnixListener::bind(&path).expect("bind the test socket");
                let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
                let _ = ready_tx.send(());
                let service = tower::service_fn(move |req: http::Request<Body>| {
                    let shared = Arc::clone(&shared);
                    async move { Ok::<_, Infallible>(route(req, shared).await) }
                });
                tonic::transport::Server::builder()
                    .serve_with_incoming_shutdown(service, incoming, async {
                        let _ = stopped.await;
                    })
                    .await
                    .expect("the test server runs");
            });
        });
        ready_rx.recv().expect("the test server binds its socket");
        PodResourcesServer {
            socket: socket.to_owned(),
            answer,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Answers `answer` from now on.
    pub fn set(&self, answer: ListPodResourcesResponse) {
        *self.answer.lock().expect("answer lock") = answer;
    }

    /// Stops serving and removes the socket, as when the kubelet goes away.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Drop for PodResourcesServer {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn route(
    req: http::Request<Body>,
    answer: Arc<Mutex<ListPodResourcesResponse>>,
) -> http::Response<Body> {
    if req.uri().path() != LIST_PATH {
        return tonic::Status::unimplemented(req.uri().path().to_string()).into_http();
    }
    let list = tower::service_fn(move |_: tonic::Request<ListPodResourcesRequest>| {
        let answer = answer.lock().expect("answer lock").clone();
        async move { Ok::<_, tonic::Status>(tonic::Response::new(answer)) }
    });
    let codec =
        tonic_prost::ProstCodec::<ListPodResourcesResponse, ListPodResourcesRequest>::default();
    tonic::server::Grpc::new(codec).unary(list, req).await
}

/// A socket file nobody listens on: connecting is refused.
pub fn refusing_socket(path: &Path) {
    let _ = std::fs::remove_file(path);
    drop(StdUnixListener::bind(path).expect("bind"));
}

/// A socket that accepts connections and never answers; kept open while the value lives.
pub struct HangingSocket {
    _listener: Arc<StdUnixListener>,
    _held: Arc<Mutex<Vec<std::os::unix::net::UnixStream>>>,
}

pub fn hanging_socket(path: &Path) -> HangingSocket {
    let _ = std::fs::remove_file(path);
    let listener = Arc::new(StdUnixListener::bind(path).expect("bind"));
    let held = Arc::new(Mutex::new(Vec::new()));
    let (l, h) = (Arc::clone(&listener), Arc::clone(&held));
    std::thread::spawn(move || {
        for stream in l.incoming().flatten() {
            h.lock().expect("held lock").push(stream);
        }
    });
    HangingSocket {
        _listener: listener,
        _held: held,
    }
}

/// A pod whose containers hold `(container, resource, device ids)`.
pub fn pod(namespace: &str, name: &str, containers: &[(&str, &str, &[&str])]) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: namespace.into(),
        containers: containers
            .iter()
            .map(|(container, resource, ids)| ContainerResources {
                name: (*container).into(),
                devices: vec![ContainerDevices {
                    resource_name: (*resource).into(),
                    device_ids: ids.iter().map(|s| (*s).to_string()).collect(),
                }],
            })
            .collect(),
    }
}

pub fn answer(pods: Vec<PodResources>) -> ListPodResourcesResponse {
    ListPodResourcesResponse {
        pod_resources: pods,
    }
}
