//! Bosun wire contracts: data only, no I/O.
