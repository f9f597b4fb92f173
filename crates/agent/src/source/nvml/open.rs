//! Finding and initialising `libnvidia-ml.so.1`, with errors that tell an operator what to do.
//!
//! "The library is not there" and "the library is there but the driver will not talk to us"
//! need different fixes (install or point `--nvml-lib` at the driver's library, versus load
//! the kernel module, fix device permissions, or reboot after a driver upgrade), so they are
//! different variants of [`NvmlOpenError`], and each message ends with how to proceed.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;

/// The file name the NVIDIA driver installs NVML under.
pub const NVML_LIB_NAME: &str = "libnvidia-ml.so.1";

/// Directories where drivers and container toolkits commonly put NVML but which are not
/// always on the dynamic loader's search path (a container with the host driver mounted,
/// the GPU operator's driver root, WSL). Tried in order after the loader's own search.
pub const COMMON_NVML_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/nvidia/lib64",
    "/usr/local/nvidia/lib",
    "/usr/lib/aarch64-linux-gnu",
    "/run/nvidia/driver/usr/lib/x86_64-linux-gnu",
    "/run/nvidia/driver/usr/lib64",
    "/usr/lib/wsl/lib",
];

const HOW_TO_PROCEED: &str = "To proceed: pass `--nvml-lib PATH` (or set `[collect] nvml_lib`) \
to the libnvidia-ml.so.1 of the installed NVIDIA driver, or run with `--simulate` to use \
simulated GPUs.";

/// Why NVML could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum NvmlOpenError {
    /// No loadable `libnvidia-ml.so.1` anywhere we looked.
    #[error(
        "NVML ({NVML_LIB_NAME}) was not found. Looked in: {}. {HOW_TO_PROCEED}",
        .looked.join("; ")
    )]
    LibraryNotFound {
        /// Each place tried, with what happened there.
        looked: Vec<String>,
    },
    /// The file exists but is not an NVML library (no `nvmlInit_v2`).
    #[error(
        "{path} was loaded but is not NVML ({NVML_LIB_NAME}): {detail}. {HOW_TO_PROCEED}",
        path = .path.display()
    )]
    NotNvml { path: PathBuf, detail: String },
    /// NVML loaded, but the NVIDIA kernel driver is not running.
    #[error(
        "NVML ({NVML_LIB_NAME}) was loaded from {path}, but the NVIDIA kernel driver is not \
         loaded (NVML_ERROR_DRIVER_NOT_LOADED). Check `nvidia-smi` and `lsmod | grep nvidia` on \
         the host; in a container, run it with the NVIDIA container toolkit (`--gpus all`, or \
         the `nvidia` runtime class in Kubernetes). Or run with `--simulate` to use simulated GPUs.",
        path = .path.display()
    )]
    DriverNotLoaded { path: PathBuf },
    /// NVML loaded, but this process may not open the GPU device nodes.
    #[error(
        "NVML ({NVML_LIB_NAME}) was loaded from {path}, but has no permission to talk to the \
         driver (NVML_ERROR_NO_PERMISSION). The /dev/nvidia* device nodes must be readable and \
         writable by this user (run as root, or add the user to the group owning them). Or run \
         with `--simulate` to use simulated GPUs.",
        path = .path.display()
    )]
    NoPermission { path: PathBuf },
    /// User-space NVML and the kernel module are of different driver versions.
    #[error(
        "NVML ({NVML_LIB_NAME}) was loaded from {path}, but it does not match the running kernel \
         driver (NVML_ERROR_LIB_RM_VERSION_MISMATCH), usually after a driver upgrade without a \
         reboot or module reload. Reboot, or point `--nvml-lib` at the library of the running \
         driver (`cat /proc/driver/nvidia/version`).",
        path = .path.display()
    )]
    VersionMismatch { path: PathBuf },
    /// Any other initialisation failure.
    #[error(
        "NVML ({NVML_LIB_NAME}) was loaded from {path}, but nvmlInit_v2 failed: {detail}. \
         {HOW_TO_PROCEED}",
        path = .path.display()
    )]
    Init { path: PathBuf, detail: String },
}

/// Opens NVML from `lib_path`, or, without one, from the loader's search path and then
/// [`COMMON_NVML_DIRS`]. Returns the handle and the path that worked, which re-initialisation
/// reuses so that a recovered driver is opened from the same place.
pub(crate) fn open_nvml(lib_path: Option<&Path>) -> Result<(Nvml, PathBuf), NvmlOpenError> {
    if let Some(path) = lib_path {
        if !path.exists() {
            return Err(NvmlOpenError::LibraryNotFound {
                looked: vec![format!("{} (no such file)", path.display())],
            });
        }
        return match init_at(path) {
            Ok(nvml) => Ok((nvml, path.to_path_buf())),
            Err(Attempt::NotLoadable(detail)) => Err(NvmlOpenError::LibraryNotFound {
                looked: vec![format!("{} (cannot be loaded: {detail})", path.display())],
            }),
            Err(Attempt::Failed(error)) => Err(error),
        };
    }

    let mut looked = Vec::new();
    let bare = Path::new(NVML_LIB_NAME);
    match init_at(bare) {
        Ok(nvml) => return Ok((nvml, bare.to_path_buf())),
        Err(Attempt::Failed(error)) => return Err(error),
        Err(Attempt::NotLoadable(detail)) => looked.push(format!(
            "the system library search path (LD_LIBRARY_PATH, /etc/ld.so.cache: {detail})"
        )),
    }
    for dir in COMMON_NVML_DIRS {
        let candidate = Path::new(dir).join(NVML_LIB_NAME);
        if !candidate.exists() {
            looked.push(dir.to_string());
            continue;
        }
        match init_at(&candidate) {
            Ok(nvml) => return Ok((nvml, candidate)),
            Err(Attempt::Failed(error)) => return Err(error),
            Err(Attempt::NotLoadable(detail)) => looked.push(format!(
                "{} (cannot be loaded: {detail})",
                candidate.display()
            )),
        }
    }
    Err(NvmlOpenError::LibraryNotFound { looked })
}

/// Re-initialises NVML from the path that worked before (after NVML went away).
pub(crate) fn reopen_nvml(path: &Path) -> Result<Nvml, NvmlError> {
    Nvml::builder().lib_path(path.as_os_str()).init()
}

enum Attempt {
    /// dlopen failed: keep looking elsewhere.
    NotLoadable(String),
    /// The library loaded: this is the answer, even though it is an error.
    Failed(NvmlOpenError),
}

fn init_at(path: &Path) -> Result<Nvml, Attempt> {
    let os: &OsStr = path.as_os_str();
    Nvml::builder()
        .lib_path(os)
        .init()
        .map_err(|e| classify_init_error(path, e))
}

fn classify_init_error(path: &Path, error: NvmlError) -> Attempt {
    let path = path.to_path_buf();
    match error {
        NvmlError::LibloadingError(e) => Attempt::NotLoadable(e.to_string()),
        NvmlError::FailedToLoadSymbol(detail) => Attempt::Failed(NvmlOpenError::NotNvml {
            path,
            detail: format!("missing nvmlInit_v2 ({detail})"),
        }),
        NvmlError::DriverNotLoaded => Attempt::Failed(NvmlOpenError::DriverNotLoaded { path }),
        NvmlError::NoPermission => Attempt::Failed(NvmlOpenError::NoPermission { path }),
        NvmlError::LibRmVersionMismatch => Attempt::Failed(NvmlOpenError::VersionMismatch { path }),
        other => Attempt::Failed(NvmlOpenError::Init {
            path,
            detail: format!("{other} ({other:?})"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_given_path_names_nvml_the_path_and_the_way_out() {
        let err = open_nvml(Some(Path::new("/nonexistent/dir/libnvidia-ml.so.1")))
            .expect_err("a missing file cannot open");
        let text = err.to_string();
        assert!(matches!(err, NvmlOpenError::LibraryNotFound { .. }));
        for needle in [
            "NVML",
            "libnvidia-ml.so.1",
            "/nonexistent/dir/libnvidia-ml.so.1 (no such file)",
            "--nvml-lib",
            "--simulate",
        ] {
            assert!(text.contains(needle), "{needle:?} missing from: {text}");
        }
    }

    #[test]
    fn without_a_path_the_search_path_and_common_directories_are_tried() {
        match open_nvml(None) {
            // A GPU host (or one with a driver but no GPU): nothing to check here.
            Ok(_) | Err(NvmlOpenError::DriverNotLoaded { .. }) => {}
            Err(NvmlOpenError::LibraryNotFound { looked }) => {
                assert!(looked[0].starts_with("the system library search path"));
                assert_eq!(looked.len(), 1 + COMMON_NVML_DIRS.len(), "{looked:?}");
                let text = NvmlOpenError::LibraryNotFound { looked }.to_string();
                assert!(text.contains("/usr/lib/x86_64-linux-gnu"), "{text}");
                assert!(text.contains("/usr/local/nvidia/lib64"), "{text}");
                assert!(text.contains("--nvml-lib") && text.contains("--simulate"));
            }
            Err(other) => assert!(!other.to_string().is_empty()),
        }
    }

    #[test]
    fn a_file_that_is_not_a_library_is_reported_as_not_loadable() {
        let dir = std::env::temp_dir().join(format!("nvml-open-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("libnvidia-ml.so.1");
        std::fs::write(&path, b"not an ELF file").unwrap();
        let text = open_nvml(Some(&path)).err().unwrap().to_string();
        assert!(text.contains("cannot be loaded"), "{text}");
        assert!(text.contains("--simulate"), "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn driver_problems_are_not_reported_as_a_missing_library() {
        let path = Path::new("/usr/lib64/libnvidia-ml.so.1");
        let Attempt::Failed(e) = classify_init_error(path, NvmlError::DriverNotLoaded) else {
            panic!("a driver problem is an answer, not a reason to keep looking");
        };
        let text = e.to_string();
        assert!(text.contains("kernel driver is not loaded"), "{text}");
        assert!(text.contains("/usr/lib64/libnvidia-ml.so.1"), "{text}");
        let Attempt::Failed(e) = classify_init_error(path, NvmlError::NoPermission) else {
            panic!("permission is an answer");
        };
        assert!(e.to_string().contains("no permission"));
    }
}
