//! A restore check in a simulated guest, as a controller installs it at quiesce time (what
//! bosun-guest writes): the checksums of the guest's application data and a `#!/bin/sh -e`
//! script at `/etc/bosun/restore-check` that verifies them with `sha256sum --check`. A backup
//! of the guest then carries both, and a restore test runs the script in its scratch guest.

#![allow(clippy::unwrap_used, reason = "test fixture: a panic is a failed test")]

use bosun_pvesim::SimHandle;
use sha2::Digest as _;

/// The guest's application data, which its restore check verifies.
pub const DATA: &str = "/srv/shop/orders.db";
/// What the data holds.
pub const ORDERS: &[u8] = b"order 1: 3 chairs\norder 2: 1 table\n";
/// Where the checksums are.
pub const CHECKSUMS: &str = "/var/lib/bosun-guest/restore-check.sha256";

/// Writes [`DATA`], its checksums and the check into the running guest `vmid` through root's
/// `pct` on the simulated node.
pub async fn install(sim: &SimHandle, vmid: u32) {
    let vmid = vmid.to_string();
    let pct = |args: &[&str], input: Option<&[u8]>| {
        let (sim, args) = (
            sim.clone(),
            args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>(),
        );
        let input = input.map(<[u8]>::to_vec);
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = sim.cli("pct", &args, input.as_deref()).await.unwrap();
            assert_eq!(out.exit, 0, "pct {args:?}: {out:?}");
        }
    };
    let dirs = ["/srv/shop", "/etc/bosun", "/var/lib/bosun-guest"];
    let mut mkdir = vec!["exec", vmid.as_str(), "--", "/usr/bin/mkdir", "-p"];
    mkdir.extend(dirs);
    pct(&mkdir, None).await;
    pct(&["push", &vmid, "/host/orders", DATA], Some(ORDERS)).await;
    let sums = format!("{:x}  {DATA}\n", sha2::Sha256::digest(ORDERS));
    pct(
        &["push", &vmid, "/host/sums", CHECKSUMS],
        Some(sums.as_bytes()),
    )
    .await;
    let script = format!(
        "#!/bin/sh -e\n# Written by the guest's controller at quiesce time.\n\
         /usr/bin/sha256sum --check --strict --quiet {CHECKSUMS}\n"
    );
    let path = bosun_proto::helper::RESTORE_CHECK_PATH;
    let push = ["push", &vmid, "/host/check", path, "--perms", "0755"];
    pct(&push, Some(script.as_bytes())).await;
}
