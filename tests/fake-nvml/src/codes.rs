//! NVML return codes under short names, and the names scenario files use for them.

use nvml_wrapper_sys::bindings::*;

pub const SUCCESS: nvmlReturn_t = nvmlReturn_enum_NVML_SUCCESS;
pub const UNINITIALIZED: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
pub const INVALID_ARGUMENT: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
pub const NOT_SUPPORTED: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
pub const NOT_FOUND: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
pub const INSUFFICIENT_SIZE: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
pub const TIMEOUT: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_TIMEOUT;
pub const GPU_IS_LOST: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST;
pub const ARGUMENT_VERSION_MISMATCH: nvmlReturn_t =
    nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
pub const UNKNOWN: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_UNKNOWN;

/// Error names accepted in a scenario's `[[fault]] error`, as in `nvml.h` without `NVML_ERROR_`.
pub const NAMES: [(&str, nvmlReturn_t); 18] = [
    ("UNINITIALIZED", UNINITIALIZED),
    ("INVALID_ARGUMENT", INVALID_ARGUMENT),
    ("NOT_SUPPORTED", NOT_SUPPORTED),
    ("NO_PERMISSION", nvmlReturn_enum_NVML_ERROR_NO_PERMISSION),
    ("NOT_FOUND", NOT_FOUND),
    (
        "INSUFFICIENT_POWER",
        nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_POWER,
    ),
    (
        "DRIVER_NOT_LOADED",
        nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED,
    ),
    ("TIMEOUT", TIMEOUT),
    ("IRQ_ISSUE", nvmlReturn_enum_NVML_ERROR_IRQ_ISSUE),
    (
        "LIBRARY_NOT_FOUND",
        nvmlReturn_enum_NVML_ERROR_LIBRARY_NOT_FOUND,
    ),
    (
        "FUNCTION_NOT_FOUND",
        nvmlReturn_enum_NVML_ERROR_FUNCTION_NOT_FOUND,
    ),
    (
        "CORRUPTED_INFOROM",
        nvmlReturn_enum_NVML_ERROR_CORRUPTED_INFOROM,
    ),
    ("GPU_IS_LOST", GPU_IS_LOST),
    ("RESET_REQUIRED", nvmlReturn_enum_NVML_ERROR_RESET_REQUIRED),
    (
        "OPERATING_SYSTEM",
        nvmlReturn_enum_NVML_ERROR_OPERATING_SYSTEM,
    ),
    (
        "LIB_RM_VERSION_MISMATCH",
        nvmlReturn_enum_NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    ),
    ("NO_DATA", nvmlReturn_enum_NVML_ERROR_NO_DATA),
    ("UNKNOWN", UNKNOWN),
];

/// The code for a scenario error name; `NVML_ERROR_` prefix optional, case-insensitive.
pub fn by_name(name: &str) -> Option<nvmlReturn_t> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("NVML_ERROR_").unwrap_or(&upper);
    NAMES
        .iter()
        .find(|(n, _)| *n == bare)
        .map(|(_, code)| *code)
}
