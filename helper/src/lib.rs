//! `bosun-helper`: the closed set of root operations.
