//! `bosunctl`: the operator CLI.
