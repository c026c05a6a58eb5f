//! Shared support for Bosun's workspace integration tests.
