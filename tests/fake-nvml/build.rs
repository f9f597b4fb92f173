//! Marks the library "never unload" (`-z nodelete`). nvml-wrapper closes the library when an
//! `Nvml` is dropped, e.g. when gpu-sentinel re-initialises after NVML went away; unloading
//! would wipe the fake's simulated fleet and fault clock, which a real driver keeps.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
