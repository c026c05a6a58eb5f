use super::*;

fn class(w: Option<u32>, cpu: Option<u32>, rate: Option<u32>) -> ShareClass {
    ShareClass {
        name: "c".into(),
        cpu_weight: w,
        cpu_limit_millicores: cpu,
        net_rate_mbytes_per_s: rate,
    }
}

#[test]
fn a_guest_without_a_class_gets_the_default_weight_and_no_limits() {
    let (share, refused) = resolve(None, &ShareBounds::default());
    assert_eq!(
        share,
        Share {
            cpu_weight: DEFAULT_CPU_WEIGHT,
            cpu_limit_millicores: None,
            net_rate_mbytes_per_s: None,
        }
    );
    assert!(refused.is_empty());
}

#[test]
fn values_within_the_bounds_are_applied_as_asked() {
    let (share, refused) = resolve(
        Some(&class(Some(300), Some(1500), Some(40))),
        &ShareBounds::default(),
    );
    assert_eq!(share.cpu_weight, 300);
    assert_eq!(share.cpu_limit_millicores, Some(1500));
    assert_eq!(share.net_rate_mbytes_per_s, Some(40));
    assert!(refused.is_empty());
}

#[test]
fn a_starving_value_is_held_at_the_floor_and_refused() {
    // A hostile hub's smallest values: weight 1, a hundredth of a core, 1 MB/s.
    let bounds = ShareBounds {
        net_rate_min_mbytes_per_s: Some(5),
        ..ShareBounds::default()
    };
    let (share, refused) = resolve(Some(&class(Some(1), Some(10), Some(1))), &bounds);
    assert_eq!(share.cpu_weight, BUILT_IN_BOUNDS.cpu_weight.0);
    assert_eq!(
        share.cpu_limit_millicores,
        Some(BUILT_IN_BOUNDS.cpu_limit_millicores.0)
    );
    assert_eq!(share.net_rate_mbytes_per_s, Some(5));
    let fields: Vec<_> = refused.iter().map(|r| (r.field, r.crossed)).collect();
    assert_eq!(
        fields,
        [
            ("cpu_weight", Crossed::Floor),
            ("cpu_limit_millicores", Crossed::Floor),
            ("net_rate_mbytes_per_s", Crossed::Floor),
        ]
    );
    assert!(refused[0].describe().contains("below the floor"));
}

#[test]
fn loosening_past_the_plan_is_held_at_its_ceiling_and_refused() {
    let bounds = ShareBounds {
        cpu_weight_max: Some(500),
        cpu_limit_max_millicores: Some(2000),
        net_rate_max_mbytes_per_s: Some(100),
        ..ShareBounds::default()
    };
    let (share, refused) = resolve(Some(&class(Some(10_000), Some(8_000), Some(1000))), &bounds);
    assert_eq!(share.cpu_weight, 500);
    assert_eq!(share.cpu_limit_millicores, Some(2000));
    assert_eq!(share.net_rate_mbytes_per_s, Some(100));
    assert_eq!(refused.len(), 3);
    assert!(refused.iter().all(|r| r.crossed == Crossed::Ceiling));
    // Asking for no limit under a ceiling is the ceiling: a guest is never unlimited.
    let (share, refused) = resolve(Some(&class(None, None, None)), &bounds);
    assert_eq!(share.cpu_limit_millicores, Some(2000));
    assert_eq!(share.net_rate_mbytes_per_s, Some(100));
    assert!(refused.is_empty());
}

#[test]
fn the_built_in_weight_ceiling_holds_without_a_plan() {
    let (share, refused) = resolve(
        Some(&class(Some(10_000), None, None)),
        &ShareBounds::default(),
    );
    assert_eq!(share.cpu_weight, BUILT_IN_BOUNDS.cpu_weight.1);
    assert_eq!(refused.len(), 1);
}

#[test]
fn bounds_that_cross_or_leave_their_range_are_invalid() {
    let crossed = ShareBounds {
        cpu_weight_min: Some(2000),
        ..ShareBounds::default()
    };
    let e = crossed.validate("guest_share").unwrap_err().to_string();
    assert!(e.contains("guest_share.cpu_weight_max"), "{e}");
    let crossed = ShareBounds {
        net_rate_min_mbytes_per_s: Some(50),
        net_rate_max_mbytes_per_s: Some(10),
        ..ShareBounds::default()
    };
    assert!(crossed.validate("g").is_err());
    let out = ShareBounds {
        cpu_limit_max_millicores: Some(0),
        ..ShareBounds::default()
    };
    assert!(out.validate("g").is_err());
    assert!(ShareBounds::default().validate("g").is_ok());
}

#[test]
fn a_class_outside_the_ranges_is_invalid() {
    for bad in [
        class(Some(0), None, None),
        class(Some(10_001), None, None),
        class(None, Some(0), None),
        class(None, Some(9), None),
        class(None, None, Some(0)),
        class(None, None, Some(100_001)),
    ] {
        assert!(bad.validate("share_classes[0]").is_err(), "{bad:?}");
    }
    let mut named = class(None, None, None);
    named.name = "no spaces".into();
    assert!(named.validate("s").is_err());
}
