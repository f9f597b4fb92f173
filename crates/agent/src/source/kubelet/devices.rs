//! Which GPU a device id of the kubelet's PodResources answer is.
//!
//! Device plugins name what they hand out in several ways, all of which occur in the field:
//!
//! | device id                         | who writes it                                     | GPU              |
//! |-----------------------------------|---------------------------------------------------|------------------|
//! | `GPU-8f6d…`                       | NVIDIA device plugin, `uuid` strategy (default)   | that UUID        |
//! | `GPU-8f6d…::3`                    | time-slicing / MPS replica 3 of that GPU          | that UUID        |
//! | `MIG-5c1e…`                       | a MIG device (`nvidia.com/mig-1g.10gb`, …)        | its parent       |
//! | `MIG-GPU-8f6d…/7/0`               | MIG device, drivers before R470                   | the UUID inside  |
//! | `0`, `0:1`, `0::2`                | `index` strategy (GPU, MIG device, replica)       | NVML index 0     |
//! | `nvidia0`, `nvidia0/gi1/vgpu2`    | GKE's device plugin (GPU, MIG, shared)            | NVML index 0     |
//!
//! A modern MIG UUID says nothing of its parent: the GPU's own list of MIG devices (read
//! from NVML) answers it. The MIG forms also name the instance ([`instance`]): by its
//! UUID, by GPU and compute instance ids (`MIG-GPU-…/7/0`), by NVML's MIG device index
//! (`0:1`) or by GPU instance (`nvidia0/gi1`); that instance's series and idle time then
//! carry the pod.

use crate::model::GpuSample;

/// What a device id names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceRef {
    /// A GPU by its UUID (`GPU-…`).
    Gpu(String),
    /// A MIG device by its own UUID (`MIG-…`).
    Mig(String),
    /// A GPU by NVML index.
    Index(u32),
}

/// The resource every NVIDIA GPU allocation goes under unless renamed.
pub(crate) const NVIDIA_GPU: &str = "nvidia.com/gpu";
/// Prefix of the MIG resources (`nvidia.com/mig-1g.10gb`), always counted.
pub(crate) const NVIDIA_MIG_PREFIX: &str = "nvidia.com/mig-";

/// Whether a resource name is a GPU resource: `nvidia.com/gpu`, any `nvidia.com/mig-*`, or
/// one of `configured` (`[collect] gpu_resource_names`, e.g. a renamed shared resource).
pub(crate) fn is_gpu_resource(name: &str, configured: &[String]) -> bool {
    name == NVIDIA_GPU
        || name.starts_with(NVIDIA_MIG_PREFIX)
        || configured.iter().any(|c| c == name)
}

/// Parses a device id (see the module table); `None` for a shape no GPU plugin writes.
pub fn parse(id: &str) -> Option<DeviceRef> {
    let id = id.trim();
    // Replicas of a shared GPU: `<id>::<n>` (NVIDIA), `<id>/vgpu<n>` (GKE).
    let base = id.split_once("::").map_or(id, |(base, _)| base);
    let base = base.split_once("/vgpu").map_or(base, |(base, _)| base);
    if let Some(rest) = base.strip_prefix("MIG-GPU-") {
        let uuid = rest.split('/').next().unwrap_or_default();
        return uuid_shaped(uuid).then(|| DeviceRef::Gpu(format!("GPU-{uuid}")));
    }
    if let Some(rest) = base.strip_prefix("MIG-") {
        return uuid_shaped(rest).then(|| DeviceRef::Mig(base.to_string()));
    }
    if let Some(rest) = base.strip_prefix("GPU-") {
        return uuid_shaped(rest).then(|| DeviceRef::Gpu(base.to_string()));
    }
    let index = base.strip_prefix("nvidia").unwrap_or(base);
    // `0:1` (index strategy, MIG device 1 of GPU 0) and `nvidia0/gi1` name GPU 0.
    let index = index.split([':', '/']).next().unwrap_or_default();
    if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    index.parse().ok().map(DeviceRef::Index)
}

/// A UUID's body: hex digits and dashes, as NVML writes them.
fn uuid_shaped(text: &str) -> bool {
    text.len() >= 8 && text.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// The GPU a device id names among `gpus`.
pub fn resolve<'g>(id: &str, gpus: &'g [GpuSample]) -> Option<&'g GpuSample> {
    match parse(id)? {
        DeviceRef::Gpu(uuid) => gpus.iter().find(|g| g.uuid.eq_ignore_ascii_case(&uuid)),
        DeviceRef::Mig(uuid) => gpus
            .iter()
            .find(|g| g.mig_devices.iter().any(|m| m.eq_ignore_ascii_case(&uuid))),
        DeviceRef::Index(index) => gpus.iter().find(|g| g.index == index),
    }
}

/// The MIG instance of `gpu` a device id names, as (GPU instance, compute instance where
/// the id says): only one NVML lists on that GPU now.
pub fn instance(id: &str, gpu: &GpuSample) -> Option<(u32, Option<u32>)> {
    let id = id.trim();
    let base = id.split_once("::").map_or(id, |(base, _)| base);
    let base = base.split_once("/vgpu").map_or(base, |(base, _)| base);
    let number = |s: &str| -> Option<u32> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let found = if let Some(rest) = base.strip_prefix("MIG-GPU-") {
        // `MIG-GPU-<uuid>/<gi>/<ci>`
        let mut parts = rest.split('/').skip(1);
        let (gi, ci) = (number(parts.next()?)?, number(parts.next()?)?);
        gpu.mig_instances
            .iter()
            .find(|i| i.gpu_instance == gi && i.compute_instance == ci)
    } else if base.starts_with("MIG-") {
        gpu.mig_instances
            .iter()
            .find(|i| i.uuid.eq_ignore_ascii_case(base))
    } else if let Some((_, rest)) = base.split_once("/gi") {
        // GKE: `nvidia<index>/gi<gpu instance>`, which names no compute instance.
        let gi = number(rest.split('/').next()?)?;
        return gpu
            .mig_instances
            .iter()
            .any(|i| i.gpu_instance == gi)
            .then_some((gi, None));
    } else if let Some((_, index)) = base.split_once(':') {
        // The index strategy: `<gpu>:<MIG device index>`.
        let index = number(index)?;
        gpu.mig_instances.iter().find(|i| i.device_index == index)
    } else {
        None
    };
    found.map(|i| (i.gpu_instance, Some(i.compute_instance)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const UUID: &str = "GPU-8f6d2c1a-5b6e-4c7d-8e9f-0a1b2c3d4e5f";
    const MIG: &str = "MIG-5c1e0b2d-1f3a-5e6b-9c8d-7a6b5c4d3e2f";

    fn gpus() -> Vec<GpuSample> {
        vec![
            GpuSample {
                index: 0,
                uuid: UUID.into(),
                ..GpuSample::default()
            },
            GpuSample {
                index: 1,
                uuid: "GPU-11111111-2222-3333-4444-555555555555".into(),
                mig_devices: vec![MIG.into()],
                ..GpuSample::default()
            },
        ]
    }

    #[test]
    fn every_form_in_the_table_names_its_gpu() {
        let gpus = gpus();
        let index_of = |id: &str| resolve(id, &gpus).map(|g| g.index);
        assert_eq!(index_of(UUID), Some(0));
        assert_eq!(index_of(&format!("{UUID}::3")), Some(0));
        // Hex digits in either case (NVML writes lowercase; some plugins uppercase).
        assert_eq!(
            index_of(&format!("GPU-{}", UUID[4..].to_uppercase())),
            Some(0)
        );
        assert_eq!(index_of(MIG), Some(1));
        assert_eq!(index_of(&format!("{MIG}::1")), Some(1));
        assert_eq!(index_of(&format!("MIG-{UUID}/7/0")), Some(0));
        assert_eq!(index_of("1"), Some(1));
        assert_eq!(index_of("1:0"), Some(1));
        assert_eq!(index_of("0::2"), Some(0));
        assert_eq!(index_of("nvidia1"), Some(1));
        assert_eq!(index_of("nvidia0/gi1/vgpu2"), Some(0));
        assert_eq!(index_of("nvidia0/vgpu2"), Some(0));
    }

    #[test]
    fn unknown_shapes_and_absent_gpus_name_nothing() {
        let gpus = gpus();
        for id in [
            "",
            "7",
            "GPU-",
            "GPU-zz",
            "MIG-",
            "nvidia",
            "eth0",
            "::1",
            "MIG-unknown1",
        ] {
            assert_eq!(resolve(id, &gpus), None, "{id:?}");
        }
        let other_mig = "MIG-00000000-0000-0000-0000-000000000000";
        assert_eq!(resolve(other_mig, &gpus), None);
    }

    #[test]
    fn every_mig_form_names_its_instance_and_only_one_that_exists() {
        use crate::model::MigInstance;
        let mut gpu = gpus().remove(1);
        gpu.mig_instances = vec![
            MigInstance {
                gpu_instance: 2,
                compute_instance: 1,
                uuid: MIG.into(),
                device_index: 1,
                ..MigInstance::default()
            },
            MigInstance {
                gpu_instance: 9,
                compute_instance: 0,
                uuid: "MIG-22222222-2222-2222-2222-222222222222".into(),
                device_index: 2,
                ..MigInstance::default()
            },
        ];
        let of = |id: &str| instance(id, &gpu);
        assert_eq!(of(MIG), Some((2, Some(1))));
        assert_eq!(of(&MIG.to_uppercase()), Some((2, Some(1))));
        assert_eq!(of(&format!("{MIG}::3")), Some((2, Some(1))));
        assert_eq!(of(&format!("MIG-{UUID}/9/0")), Some((9, Some(0))));
        assert_eq!(of("1:2"), Some((9, Some(0))));
        assert_eq!(of("nvidia1/gi9/vgpu0"), Some((9, None)));
        // Instances NVML does not list, and ids that name a whole GPU.
        for id in [
            "MIG-00000000-0000-0000-0000-000000000000",
            &format!("MIG-{UUID}/7/0"),
            "1:5",
            "nvidia1/gi4",
            "1",
            UUID,
            "nvidia1",
        ] {
            assert_eq!(of(id), None, "{id:?}");
        }
    }

    #[test]
    fn gpu_resources_are_nvidia_mig_and_configured_names() {
        let configured = vec!["nvidia.com/gpu.shared".to_string()];
        assert!(is_gpu_resource("nvidia.com/gpu", &[]));
        assert!(is_gpu_resource("nvidia.com/mig-1g.10gb", &[]));
        assert!(is_gpu_resource("nvidia.com/gpu.shared", &configured));
        assert!(!is_gpu_resource("nvidia.com/gpu.shared", &[]));
        assert!(!is_gpu_resource("example.com/fpga", &configured));
    }

    proptest! {
        /// Any text, as a kubelet may send, parses or not without panicking, and what
        /// parses names a GPU form the table knows.
        #[test]
        fn any_device_id_parses_without_panic(id in ".{0,80}") {
            match parse(&id) {
                Some(DeviceRef::Gpu(u)) => prop_assert!(u.starts_with("GPU-")),
                Some(DeviceRef::Mig(u)) => prop_assert!(u.starts_with("MIG-")),
                Some(DeviceRef::Index(_)) | None => {}
            }
        }

        /// Any text names a listed instance or none, without panicking.
        #[test]
        fn any_device_id_names_an_instance_without_panic(id in ".{0,80}") {
            let mut gpu = gpus().remove(1);
            gpu.mig_instances = vec![crate::model::MigInstance {
                gpu_instance: 7,
                uuid: MIG.into(),
                ..Default::default()
            }];
            if let Some((gi, ci)) = instance(&id, &gpu) {
                prop_assert_eq!(gi, 7);
                prop_assert!(ci.is_none_or(|ci| ci == 0));
            }
        }

        /// Replica and MIG suffixes never change the GPU a UUID names.
        #[test]
        fn suffixes_keep_the_gpu(n in 0u32..1000, gi in 0u32..8) {
            let gpus = gpus();
            let index_of = |id: &str| resolve(id, &gpus).map(|g| g.index);
            prop_assert_eq!(index_of(&format!("{UUID}::{n}")), Some(0));
            prop_assert_eq!(index_of(&format!("MIG-{UUID}/{gi}/0")), Some(0));
            prop_assert_eq!(index_of(&format!("1:{gi}")), Some(1));
        }
    }
}
