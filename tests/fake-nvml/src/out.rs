//! Writing answers through the caller's pointers, the way NVML does: a null pointer is an
//! invalid argument, a string that does not fit is "insufficient size".

use std::os::raw::{c_char, c_uint};

use nvml_wrapper_sys::bindings::nvmlReturn_t;

use crate::codes::{INSUFFICIENT_SIZE, INVALID_ARGUMENT};

/// Writes `value` to `ptr`.
///
/// # Safety
/// `ptr` is null or valid for writing one `T` (NVML's contract for output parameters).
pub unsafe fn write<T>(ptr: *mut T, value: T) -> Result<(), nvmlReturn_t> {
    if ptr.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: non-null, and valid for one write by the caller's contract.
    unsafe { ptr.write(value) };
    Ok(())
}

/// Writes `text` NUL-terminated into the caller's buffer of `length` bytes.
///
/// # Safety
/// `buffer` is null or valid for writing `length` bytes.
pub unsafe fn write_str(
    buffer: *mut c_char,
    length: c_uint,
    text: &str,
) -> Result<(), nvmlReturn_t> {
    if buffer.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    let bytes = text.as_bytes();
    if bytes.len() + 1 > length as usize {
        return Err(INSUFFICIENT_SIZE);
    }
    // SAFETY: `bytes.len() + 1 <= length` bytes fit in the caller's buffer; the regions
    // cannot overlap (ours is a Rust string).
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buffer, bytes.len());
        buffer.add(bytes.len()).write(0);
    }
    Ok(())
}

/// Copies `text` into a fixed C array, NUL-terminated and truncated to fit.
pub fn fill_array<const N: usize>(array: &mut [c_char; N], text: &str) {
    let n = text.len().min(N.saturating_sub(1));
    for (dst, src) in array.iter_mut().zip(text.as_bytes()[..n].iter()) {
        *dst = *src as c_char;
    }
    if N > 0 {
        array[n] = 0;
    }
}

/// A ratio 0–1 as NVML's whole percent.
pub fn percent(ratio: f64) -> c_uint {
    (ratio * 100.0).round().clamp(0.0, 100.0) as c_uint
}
