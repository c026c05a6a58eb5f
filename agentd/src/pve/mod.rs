//! The Proxmox VE API: the `Pve` seam and its HTTPS client.
