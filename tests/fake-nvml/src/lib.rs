//! Stand-in for libnvidia-ml.so.1 (work in progress).
