use super::*;

fn listing(vmid: u32) -> CtSummary {
    serde_json::from_value(serde_json::json!({
        "vmid": vmid, "status": "running", "name": format!("g{vmid}"),
        "maxmem": 512u64 << 20, "mem": 100u64 << 20, "maxdisk": 8u64 << 30, "disk": 1u64 << 30,
        "cpus": 2, "cpu": 0.01, "uptime": 100, "tags": "bosun-id-x",
    }))
    .unwrap()
}

fn config() -> CtConfig {
    serde_json::from_value(serde_json::json!({ "digest": "d1", "hostname": "g", "cores": 2 }))
        .unwrap()
}

/// Keeps `cts` as read at the cache's current pass.
fn read_all(cache: &mut ConfigCache, cts: &[CtSummary]) {
    for ct in cts {
        cache.entries.insert(
            ct.vmid.get(),
            Entry {
                listed: Listed::of(ct),
                uptime: ct.uptime,
                config: config(),
                firewall: None,
            },
        );
    }
}

#[test]
fn a_container_never_read_is_read() {
    let mut cache = ConfigCache::default();
    cache.begin(Some(0));
    assert_eq!(cache.due(&listing(100)), Some(Reason::Unknown));
}

#[test]
fn steady_containers_are_read_in_turn_a_share_each_pass() {
    let cts: Vec<CtSummary> = (100..120).map(listing).collect();
    let mut cache = ConfigCache::default();
    cache.begin(Some(7));
    read_all(&mut cache, &cts);
    let mut turns = BTreeMap::<u32, u32>::new();
    for _ in 0..REFRESH_PASSES {
        cache.begin(Some(7));
        let due: Vec<u32> = cts
            .iter()
            .filter_map(|ct| cache.due(ct).map(|r| (ct.vmid.get(), r)))
            .map(|(vmid, reason)| {
                assert_eq!(reason, Reason::Turn, "{vmid}");
                vmid
            })
            .collect();
        // 20 consecutive vmids, a fourth of them each pass.
        assert_eq!(due.len(), 20 / usize::try_from(REFRESH_PASSES).unwrap());
        for vmid in due {
            *turns.entry(vmid).or_default() += 1;
        }
    }
    // Every container once in REFRESH_PASSES passes.
    assert_eq!(turns.len(), 20);
    assert!(turns.values().all(|n| *n == 1), "{turns:?}");
    assert_eq!(cache.kept(), 20);
}

/// A pass that is no container's turn (vmid 100 of 4 passes).
fn off_turn(cache: &mut ConfigCache, mark: u64) {
    loop {
        cache.begin(Some(mark));
        if !cache.turn(Vmid::new(100).unwrap()) {
            return;
        }
    }
}

#[test]
fn what_the_listing_shows_of_a_config_change_is_read_at_once() {
    let base = listing(100);
    let changed: [(&str, serde_json::Value); 8] = [
        ("status", "stopped".into()),
        ("name", "other".into()),
        ("lock", "backup".into()),
        ("maxmem", (1024u64 << 20).into()),
        ("maxdisk", (16u64 << 30).into()),
        ("cpus", 4.into()),
        ("tags", "bosun-id-y".into()),
        ("uptime", 5.into()),
    ];
    for (key, value) in changed {
        let mut cache = ConfigCache::default();
        cache.begin(Some(1));
        read_all(&mut cache, std::slice::from_ref(&base));
        off_turn(&mut cache, 1);
        assert_eq!(cache.due(&base), None);
        let mut v = serde_json::json!({
            "vmid": 100, "status": "running", "name": "g100", "maxmem": 512u64 << 20,
            "maxdisk": 8u64 << 30, "cpus": 2, "uptime": 100, "tags": "bosun-id-x",
        });
        v[key] = value;
        let ct: CtSummary = serde_json::from_value(v).unwrap();
        assert_eq!(cache.due(&ct), Some(Reason::Listed), "{key}");
    }
}

#[test]
fn usage_and_a_longer_uptime_are_no_change() {
    let mut cache = ConfigCache::default();
    cache.begin(Some(1));
    read_all(&mut cache, &[listing(100)]);
    off_turn(&mut cache, 1);
    let mut later = listing(100);
    later.mem = Some(300 << 20);
    later.disk = Some(2 << 30);
    later.cpu = Some(0.5);
    later.uptime = Some(130);
    assert_eq!(cache.due(&later), None);
}

#[test]
fn a_change_the_agent_may_have_made_forgets_everything() {
    let mut cache = ConfigCache::default();
    cache.begin(Some(1));
    read_all(&mut cache, &[listing(100), listing(101)]);
    off_turn(&mut cache, 1);
    assert_eq!(cache.kept(), 2);
    // The client sent a request that may change the node.
    cache.begin(Some(2));
    assert_eq!(cache.kept(), 0);
    assert_eq!(cache.due(&listing(100)), Some(Reason::Unknown));
    // A client that keeps no mark: nothing is kept from one pass to the next.
    read_all(&mut cache, &[listing(100)]);
    cache.begin(None);
    assert_eq!(cache.kept(), 0);
    read_all(&mut cache, &[listing(100)]);
    cache.begin(None);
    assert_eq!(cache.due(&listing(100)), Some(Reason::Unknown));
}

#[test]
fn a_container_gone_from_the_listing_is_forgotten() {
    let mut cache = ConfigCache::default();
    cache.begin(Some(1));
    read_all(&mut cache, &[listing(100), listing(101)]);
    cache.keep_only(&BTreeSet::from([101]));
    assert_eq!(cache.kept(), 1);
    assert_eq!(cache.due(&listing(100)), Some(Reason::Unknown));
}
