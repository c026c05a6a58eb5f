//! `bosun-hubd`: the hub.
