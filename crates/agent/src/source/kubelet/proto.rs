//! The kubelet's PodResources API, `v1.PodResourcesLister/List`, as prost messages derived
//! by hand from `pkg/apis/podresources/v1/api.proto` of k8s.io/kubelet (so the build needs
//! no protoc), and the one call we make.
//!
//! Only the fields we read are declared; protobuf decoding skips the others (CPU ids,
//! memory, topology, dynamic resources), so newer kubelets stay compatible. The field
//! numbers are the proto's.

use std::path::{Path, PathBuf};

use hyper::http::uri::PathAndQuery;
use hyper_util::rt::TokioIo;
use tonic::transport::{Endpoint, Uri};

/// The gRPC path of `List`.
pub const LIST_PATH: &str = "/v1.PodResourcesLister/List";

/// Largest answer accepted: a node with hundreds of pods stays far below it.
const MAX_MESSAGE_BYTES: usize = 16 << 20;

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesResponse {
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub namespace: String,
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerDevices {
    #[prost(string, tag = "1")]
    pub resource_name: String,
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
}

/// Why `List` gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("List failed: {0}")]
    Call(String),
}

/// Connects to the kubelet's socket and calls `List` once. The caller bounds the time.
pub async fn list(socket: &Path) -> Result<ListPodResourcesResponse, ListError> {
    let socket: PathBuf = socket.to_owned();
    // The URI is a placeholder: the connector below ignores it and dials the socket.
    let channel = Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(socket).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|e| ListError::Connect(error_chain(&e)))?;
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES);
    grpc.ready()
        .await
        .map_err(|e| ListError::Connect(error_chain(&e)))?;
    let codec =
        tonic_prost::ProstCodec::<ListPodResourcesRequest, ListPodResourcesResponse>::default();
    grpc.unary(
        tonic::Request::new(ListPodResourcesRequest {}),
        PathAndQuery::from_static(LIST_PATH),
        codec,
    )
    .await
    .map(tonic::Response::into_inner)
    .map_err(|status| ListError::Call(format!("{:?}: {}", status.code(), status.message())))
}

/// An error and its causes on one line ("transport error: No such file or directory").
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let line = cause.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = cause.source();
    }
    text
}
