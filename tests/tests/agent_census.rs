//! The census's hostile-hub cases (decision 0096), generated from `bosun_proto::census`: for
//! every unsigned field of `bosun.desired/v1` the hub sends, as a hub holding its own key and
//! database would, the field withheld, zero, at the largest value validation accepts, and
//! (per guest) the other guest's value, against the real agent and hub over TLS and the
//! simulator's Proxmox and PBS. After each, what reached them must keep the signed plan's
//! promises: backups to the plan's PBS tier and its hourly verification go on, no guest is
//! destroyed, stopped or restored.
//!
//! Several fields' values travel in one generation when together they still validate, so the
//! suite sends a handful of generations, not one per field.
//!
//! The poll answer's fields (all cosmetic or signed) get the same kinds of values from a hub
//! that answers with anything: the values the agent takes several to an answer, the ones it
//! refuses together; the plan's backups go on and no guest is stopped, destroyed or restored.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use agent_support::pbs_stack::*;
use agent_support::*;
use bosun_proto::census;
use bosun_proto::desired::DesiredState;
use bosun_proto::poll::PollResponse;
use reqwest::Method;
use serde_json::{Map, Value, json};

/// A hostile value of a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hostile {
    /// Left out of the document.
    Withheld,
    /// The zero of its type: `0`, `""`, `false`, `[]`, `{}`.
    Zero,
    /// The largest value validation accepts (a number, or a string's length).
    Maximum,
    /// The other guest's value (fields under `guests[]` only): the two guests' values swapped.
    OtherGuests,
    /// The `n`th value an enumeration admits other than the one the document holds (the
    /// first guest's only, for a per-guest field: the other guest keeps the plan's word).
    Variant(usize),
}

/// An enumeration of the desired state has at most this many values (`storage[].type`).
const VARIANTS: usize = 5;

const KINDS: [Hostile; 4 + VARIANTS] = [
    Hostile::Withheld,
    Hostile::Zero,
    Hostile::Maximum,
    Hostile::OtherGuests,
    Hostile::Variant(0),
    Hostile::Variant(1),
    Hostile::Variant(2),
    Hostile::Variant(3),
    Hostile::Variant(4),
];

/// A path split into its steps: a name, and whether it steps into a list's items.
fn steps(path: &str) -> Vec<(&str, bool)> {
    path.split('.')
        .map(|step| match step.strip_suffix("[]") {
            Some(name) => (name, true),
            None => (step, false),
        })
        .collect()
}

/// Calls `leaf` with the object holding `path`'s last step and its name, for every place
/// `path` names in `doc`. Objects on the way that are absent are not made: a field under an
/// absent optional part has no place in this document.
fn at_each(
    doc: &mut Value,
    path: &[(&str, bool)],
    leaf: &mut dyn FnMut(&mut Map<String, Value>, &str),
) {
    let Some(((name, list), rest)) = path.split_first() else {
        return;
    };
    let Some(object) = doc.as_object_mut() else {
        return;
    };
    if rest.is_empty() {
        leaf(object, name);
        return;
    }
    match (object.get_mut(*name), list) {
        (Some(Value::Array(items)), true) => {
            for item in items {
                at_each(item, rest, leaf);
            }
        }
        (Some(inner), false) => at_each(inner, rest, leaf),
        _ => {}
    }
}

/// Whether the hub's own validation would take `doc`: it parses as desired state and
/// validates.
fn valid(doc: &Value) -> bool {
    serde_json::from_value::<DesiredState>(doc.clone()).is_ok_and(|d| d.validate().is_ok())
}

/// `doc` with `path` set by `set` everywhere it is, or `None` where the path names no place.
fn with(
    doc: &Value,
    path: &str,
    set: &mut dyn FnMut(&mut Map<String, Value>, &str),
) -> Option<Value> {
    let mut out = doc.clone();
    let mut places = 0;
    at_each(&mut out, &steps(path), &mut |object, name| {
        places += 1;
        set(object, name);
    });
    (places > 0).then_some(out)
}

/// Whether the agent takes `answer` as a poll answer: it parses and validates.
fn answer_taken(answer: &Value) -> bool {
    serde_json::from_value::<PollResponse>(answer.clone()).is_ok_and(|a| a.validate().is_ok())
}

/// The largest `n` in `start..=limit` for which `make(n)` is taken (`make(limit)` when none
/// is: the receiver refuses it).
fn largest(
    start: u64,
    limit: u64,
    make: &dyn Fn(u64) -> Option<Value>,
    taken: fn(&Value) -> bool,
) -> Option<Value> {
    let ok = |n: u64| make(n).filter(taken);
    let (mut low, mut high) = (start, limit);
    if let Some(doc) = ok(high) {
        return Some(doc);
    }
    if ok(low).is_none() {
        return make(limit);
    }
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        if ok(mid).is_some() {
            low = mid;
        } else {
            high = mid;
        }
    }
    ok(low)
}

/// `base` with `kind` of `path`; `None` where the document has no place for it. A maximum is
/// the largest value the receiver still `taken`.
fn hostile(
    base: &Value,
    path: &str,
    kind: Hostile,
    fields: &BTreeMap<String, Value>,
    taken: fn(&Value) -> bool,
) -> Option<Value> {
    match kind {
        Hostile::Variant(n) => {
            let values = census::schema::enum_values(fields.get(path)?);
            let (doc, at) = match path.strip_prefix("guests[].") {
                Some(rest) => (&base["guests"][0], rest),
                None => (base, path),
            };
            let mut current = None;
            let mut doc = doc.clone();
            at_each(&mut doc, &steps(at), &mut |o, name| {
                current = o.get(name).cloned()
            });
            let other = values
                .iter()
                .filter(|v| current.as_ref().and_then(Value::as_str) != Some(v.as_str()))
                .nth(n)?;
            at_each(&mut doc, &steps(at), &mut |o, name| {
                o.insert(name.to_owned(), json!(other));
            });
            let mut out = base.clone();
            match path.strip_prefix("guests[].") {
                Some(_) => out["guests"][0] = doc,
                None => out = doc,
            }
            Some(out)
        }
        Hostile::Withheld => with(base, path, &mut |o, name| {
            o.remove(name);
        }),
        Hostile::Zero => with(base, path, &mut |o, name| {
            let zero = match o.get(name) {
                Some(Value::String(_)) => json!(""),
                Some(Value::Bool(_)) => json!(false),
                Some(Value::Array(_)) => json!([]),
                Some(Value::Object(_)) => json!({}),
                _ => json!(0),
            };
            o.insert(name.to_owned(), zero);
        }),
        Hostile::Maximum => {
            let mut current = None;
            with(base, path, &mut |o, name| {
                current = current.clone().or(o.get(name).cloned())
            })?;
            match current {
                Some(Value::Bool(_)) => with(base, path, &mut |o, name| {
                    o.insert(name.to_owned(), json!(true));
                }),
                Some(Value::String(text)) => {
                    let first = text.chars().next().unwrap_or('a');
                    largest(
                        u64::try_from(text.len()).unwrap_or(0),
                        4096,
                        &|n| {
                            with(base, path, &mut |o, name| {
                                o.insert(
                                    name.to_owned(),
                                    json!(
                                        first.to_string().repeat(usize::try_from(n).unwrap_or(0))
                                    ),
                                );
                            })
                        },
                        taken,
                    )
                }
                Some(Value::Array(_) | Value::Object(_)) => None,
                number => largest(
                    number.and_then(|n| n.as_u64()).unwrap_or(0),
                    u64::from(u32::MAX),
                    &|n| {
                        with(base, path, &mut |o, name| {
                            o.insert(name.to_owned(), json!(n));
                        })
                    },
                    taken,
                ),
            }
        }
        Hostile::OtherGuests => {
            let rest = path.strip_prefix("guests[].")?;
            let guests = base["guests"].as_array()?;
            let (a, b) = (guests.first()?.clone(), guests.get(1)?.clone());
            let value = |guest: &Value| {
                let mut found = None;
                let mut guest = guest.clone();
                at_each(&mut guest, &steps(rest), &mut |o, name| {
                    found = o.get(name).cloned()
                });
                found
            };
            let (va, vb) = (value(&a), value(&b));
            if va == vb {
                return None;
            }
            let mut out = base.clone();
            for (i, v) in [(0, vb), (1, va)] {
                at_each(
                    &mut out["guests"][i],
                    &steps(rest),
                    &mut |o, name| match &v {
                        Some(v) => {
                            o.insert(name.to_owned(), v.clone());
                        }
                        None => {
                            o.remove(name);
                        }
                    },
                );
            }
            Some(out)
        }
    }
}

/// What became of one field's hostile value.
#[derive(Debug)]
enum Fate {
    /// The document has no place for it (an absent optional part, one guest's value equal to
    /// the other's).
    NoPlace,
    /// Validation refuses it: the hub does not store it.
    Refused,
    /// Sent in the generation of this batch.
    Sent(usize),
}

/// Sends `doc` as the hub would store it, unplanned; false when the hub refuses to store it.
async fn hub_stores(s: &Stack, doc: &Value) -> bool {
    let before = generation(&s.agent);
    let (status, _) = s
        .hub
        .admin(
            Method::PUT,
            &format!("/v1/admin/hosts/{}/desired", s.host),
            Some(doc.clone()),
        )
        .await;
    if !(200..300).contains(&status) {
        return false;
    }
    eventually(
        Duration::from_secs(30),
        "the agent takes the hub's generation",
        || async { generation(&s.agent) > before },
    )
    .await;
    true
}

/// Requests that stop or shut down a guest other than those `doc` says should be stopped.
fn stops(sim: &bosun_pvesim::SimHandle, doc: &Value, vmids: &[u64]) -> usize {
    let stopped: Vec<String> = doc["guests"]
        .as_array()
        .into_iter()
        .flatten()
        .zip(vmids)
        .filter(|(guest, _)| guest["power"] == "stopped")
        .map(|(_, vmid)| format!("/lxc/{vmid}/"))
        .collect();
    sim.requests()
        .iter()
        .filter(|r| r.path.contains("/status/stop") || r.path.contains("/status/shutdown"))
        .filter(|r| !stopped.iter().any(|at| r.path.contains(at.as_str())))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_unsigned_field_of_desired_state_breaks_the_signed_plans_promises() {
    // Two running guests backed up to PBS every 3 s, verified hourly (a second) by the plan;
    // the hub's own verify policy off, a restore-test window, thresholds and share classes
    // present so that their fields have a place.
    let s = stack_of(
        1,
        json!({ "enabled": false, "interval_hours": 8760 }),
        &["alpha", "beta"],
    )
    .await;
    eventually(Duration::from_secs(90), "an ok verification", || async {
        reported(&s.hub, s.host)
            .await
            .iter()
            .any(|v| v["outcome"] == "ok")
    })
    .await;
    let mut base = s.desired.clone();
    base["restore_test_policy"]["window"] = json!({ "start_hour": 0, "hours": 24 });
    for (i, guest) in base["guests"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .enumerate()
    {
        let band = |high| json!({ "high_percent": high, "low_percent": 10 });
        guest["thresholds"] =
            json!({ "cpu": band(90 - i), "memory": band(80 - i), "disk": band(70 - i) });
        guest["vmid"] = json!(running_vmid(&s.agent.handles.reconcile, s.guests[i]).await);
        guest["resources"]["cores"] = json!(1 + i);
        guest["share_class"] = json!(["a", "b"][i]);
    }
    // Share classes (decision 0100), so their fields and each guest's class have a place.
    base["share_classes"] = json!([
        { "name": "a", "cpu_weight": 200, "cpu_limit_millicores": 1500, "net_rate_mbytes_per_s": 50 },
        { "name": "b", "cpu_weight": 100, "cpu_limit_millicores": 1000, "net_rate_mbytes_per_s": 20 },
    ]);
    base["guests"][1]["customer"] = json!({ "customer_id": "other", "display_name": "Other" });
    // An order, so that its fields have a place in both guests: beta starts after alpha
    // (decision 0099).
    base["guests"][0]["provides"] = json!(["db"]);
    base["guests"][0]["requires"] = json!([]);
    base["guests"][1]["provides"] = json!([]);
    base["guests"][1]["requires"] = json!(["db"]);
    assert!(valid(&base), "the base document validates");
    assert!(
        hub_stores(&s, &base).await,
        "the hub stores the base document"
    );
    let vmids: Vec<u64> = base["guests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["vmid"].as_u64().unwrap())
        .collect();
    // A restore test restores into a scratch guest (protection the hub may add); a restore
    // onto one of the guests' own VMIDs is what must not happen.
    let onto_guests = |sim: &bosun_pvesim::SimHandle| {
        agent_restores(sim)
            .into_iter()
            .filter(|(vmid, _)| vmids.iter().any(|v| v.to_string() == *vmid))
            .count()
    };
    let (destroyed, restored) = (destructive(&s.sim).len(), onto_guests(&s.sim));

    let fields: Vec<&census::Entry> = census::desired_unsigned().collect();
    let schemas = census::schema::desired_fields().unwrap();
    assert!(fields.len() > 40, "the census names the unsigned fields");
    let mut fates: Vec<(&str, Hostile, Fate)> = Vec::new();
    let mut batch_no = 0;
    for kind in KINDS {
        // Several fields' values in one document while it still validates.
        let mut pending: Vec<&str> = fields.iter().map(|e| e.path).collect();
        while !pending.is_empty() {
            let mut doc = base.clone();
            let mut taken = Vec::new();
            let mut left = Vec::new();
            for path in pending {
                let Some(alone) = hostile(&base, path, kind, &schemas, valid) else {
                    fates.push((path, kind, Fate::NoPlace));
                    continue;
                };
                if !valid(&alone) {
                    fates.push((path, kind, Fate::Refused));
                    continue;
                }
                match hostile(&doc, path, kind, &schemas, valid).filter(valid) {
                    Some(next) => {
                        doc = next;
                        taken.push(path);
                    }
                    _ => left.push(path),
                }
            }
            if taken.is_empty() {
                break;
            }
            batch_no += 1;
            let stopped = stops(&s.sim, &doc, &vmids);
            let stored = hub_stores(&s, &doc).await;
            for path in &taken {
                fates.push((
                    path,
                    kind,
                    if stored {
                        Fate::Sent(batch_no)
                    } else {
                        Fate::Refused
                    },
                ));
            }
            if stored {
                let (verifies, backups) = calls_within(&s, Duration::from_secs(7)).await;
                eprintln!(
                    "batch {batch_no} ({kind:?}, {} fields): {verifies} verify calls and {backups} PBS backups in 7 plan-hours",
                    taken.len()
                );
                assert!(
                    verifies >= 3,
                    "batch {batch_no} ({kind:?} of {taken:?}): the plan's hourly verification stopped: {verifies} in 7 hours"
                );
                assert!(
                    backups >= 1,
                    "batch {batch_no} ({kind:?} of {taken:?}): backups to the plan's PBS tier stopped"
                );
                assert_eq!(
                    destructive(&s.sim).len(),
                    destroyed,
                    "batch {batch_no} ({kind:?} of {taken:?}) destroyed a guest"
                );
                assert_eq!(
                    onto_guests(&s.sim),
                    restored,
                    "batch {batch_no} ({kind:?} of {taken:?}) restored"
                );
                assert_eq!(
                    stops(&s.sim, &doc, &vmids),
                    stopped,
                    "batch {batch_no} ({kind:?} of {taken:?}) stopped a guest"
                );
            }
            pending = left;
        }
    }

    let sent = fates
        .iter()
        .filter(|(_, _, f)| matches!(f, Fate::Sent(_)))
        .count();
    for (path, kind, fate) in &fates {
        let fate = match fate {
            Fate::Sent(n) => format!("sent in generation {n}"),
            other => format!("{other:?}"),
        };
        eprintln!("{path:<50} {kind:?}: {fate}");
    }
    // Every unsigned field got each kind of hostile value, or a recorded reason it has none.
    for entry in &fields {
        for kind in KINDS {
            assert!(
                fates.iter().any(|(p, k, _)| *p == entry.path && *k == kind),
                "`{}` got no {kind:?} value",
                entry.path
            );
        }
    }
    assert!(
        sent >= fields.len(),
        "too few hostile values reached the agent: {sent}"
    );
    eprintln!("{sent} hostile values sent in {batch_no} generations");
    // And the guests run on, once the hub sends the plan's document again.
    assert!(hub_stores(&s, &base).await);
    for guest in &s.guests {
        running_vmid(&s.agent.handles.reconcile, *guest).await;
    }
    s.agent.stop().await;
    s.hub.stop().await;
}

/// Backups the simulator ran to the plan's tier 0 (the node's `local`).
fn local_backups(sim: &bosun_pvesim::SimHandle) -> usize {
    sim.requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/vzdump"))
        .filter(|r| r.params.iter().any(|(k, v)| k == "storage" && v == "local"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_field_of_the_poll_answer_breaks_the_signed_plans_promises() {
    // Two running guests under a plan that backs them up to `local` every 5 s, behind a hub
    // that answers polls with anything.
    let sim = start_sim(bosun_pvesim::SimConfig::fast()).await;
    let hub = agent_support::hostile_hub::HostileHub::start().await;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some("census-enroll"));
    let agent = InProcessAgent::start(&files.config_path).await;
    let guests = [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()];
    let mut desired = desired(
        &sim,
        &[(guests[0], "alpha"), (guests[1], "beta")],
        "running",
    );
    hub.set_desired(desired.clone());
    let mut vmids = Vec::new();
    for guest in guests {
        vmids.push(running_vmid(&agent.handles.reconcile, guest).await);
    }
    desired["backup_policy"]["schedule"] = json!("*:*:0/5");
    desired["data_plan"] = agent_support::signing::signed_plan(&agent_support::signing::plan_of(
        &desired,
        hub.host_id,
    ));
    hub.set_desired(desired);
    let first = local_backups(&sim);
    eventually(
        Duration::from_secs(30),
        "the plan's first backup",
        || async { local_backups(&sim) > first },
    )
    .await;
    let (destroyed, restored) = (destructive(&sim).len(), agent_restores(&sim).len());

    // Every optional field of the answer present, so that each has a place to be hostile in.
    let complete = |answer: &mut Value| {
        answer["correlation_id"] = json!("census-generation");
        answer["config"]["update_window"] = json!({ "start": "03:00", "duration_minutes": 60 });
        answer["hub_pins"] = json!([format!("spki:{}", "ab".repeat(32))]);
        answer["rotate_host_key"] = json!(false);
        answer["next_host_key_sha256"] = json!("cd".repeat(32));
    };
    let mut sample = json!({
        "schema": "bosun.poll-response/v1", "generation": 1, "desired": null, "jobs": [],
        "config": { "poll_interval_seconds": 1, "long_poll_seconds": 1 },
        "audit_acked_seq": 0, "report_seq": 0, "full_report": false,
    });
    complete(&mut sample);
    assert!(
        answer_taken(&sample),
        "the complete answer is one the agent takes"
    );
    let schemas = census::schema::poll_answer_fields().unwrap();
    let fields: Vec<&census::Entry> = census::POLL_ANSWER
        .iter()
        .filter(|e| e.class == census::FieldClass::Cosmetic)
        .collect();
    assert!(fields.len() >= 10, "the census names the answer's fields");
    // The largest poll interval keeps the agent away for five minutes: sent last.
    let slowest = |path: &str, kind: Hostile| {
        path == "config.poll_interval_seconds" && kind == Hostile::Maximum
    };
    // Per kind: the values the agent takes, several to an answer while it still takes them;
    // then the values it refuses, together in one answer (it refuses the whole answer).
    let mut batches: Vec<(Hostile, Vec<&str>)> = Vec::new();
    let mut last = None;
    for kind in KINDS {
        let mut refused = Vec::new();
        let mut pending: Vec<&str> = Vec::new();
        for entry in &fields {
            match hostile(&sample, entry.path, kind, &schemas, answer_taken) {
                None => {}
                Some(_) if slowest(entry.path, kind) => last = Some((kind, vec![entry.path])),
                Some(alone) if !answer_taken(&alone) => refused.push(entry.path),
                Some(_) => pending.push(entry.path),
            }
        }
        while !pending.is_empty() {
            let mut answer = sample.clone();
            let (mut taken, mut left) = (Vec::new(), Vec::new());
            for path in pending {
                match hostile(&answer, path, kind, &schemas, answer_taken).filter(answer_taken) {
                    Some(next) => {
                        answer = next;
                        taken.push(path);
                    }
                    None => left.push(path),
                }
            }
            if taken.is_empty() {
                break;
            }
            batches.push((kind, taken));
            pending = left;
        }
        if !refused.is_empty() {
            batches.push((kind, refused));
        }
    }
    batches.extend(last);
    let mut sent = 0;
    for (kind, paths) in &batches {
        sent += paths.len();
        let (kind, paths_owned) = (
            *kind,
            paths.iter().map(|p| (*p).to_owned()).collect::<Vec<_>>(),
        );
        let schemas = schemas.clone();
        let rewrite: agent_support::hostile_hub::Rewrite = Arc::new(move |answer: &mut Value| {
            complete(answer);
            for path in &paths_owned {
                if let Some(next) = hostile(answer, path, kind, &schemas, answer_taken) {
                    *answer = next;
                }
            }
        });
        let polled = hub.script.lock().polls.len();
        hub.script.lock().rewrite = Some(rewrite);
        eventually(
            Duration::from_secs(30),
            "the agent polls the hostile answer",
            || async { hub.script.lock().polls.len() > polled },
        )
        .await;
        let before = local_backups(&sim);
        tokio::time::sleep(Duration::from_secs(8)).await;
        let backups = local_backups(&sim) - before;
        eprintln!(
            "answer ({kind:?} of {paths:?}): {backups} backups in 8 s (the plan: 2 guests every 5 s)"
        );
        assert!(
            backups >= 2,
            "{kind:?} of {paths:?}: the plan's backups stopped: {backups} in 8 s"
        );
        assert_eq!(
            destructive(&sim).len(),
            destroyed,
            "{kind:?} of {paths:?} destroyed a guest"
        );
        assert_eq!(
            agent_restores(&sim).len(),
            restored,
            "{kind:?} of {paths:?} restored"
        );
        for vmid in &vmids {
            assert_eq!(
                sim.guest_running(*vmid),
                Some(true),
                "{kind:?} of {paths:?} stopped guest {vmid}"
            );
        }
    }
    eprintln!("{sent} hostile answer values in {} answers", batches.len());
    assert!(sent >= fields.len() * 2, "too few hostile answers: {sent}");
    agent.stop().await;
    hub.shutdown();
}
