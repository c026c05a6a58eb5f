//! `bosun-pvesim`: a simulated Proxmox VE node.
