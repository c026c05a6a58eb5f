//! Client for `bosun-helper`, the agent's only route to root.
