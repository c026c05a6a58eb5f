//! Each crate's suites are one test binary (decision 0089): a suite file its `main.rs` does not
//! declare would never be built or run, silently. This holds every `tests/*.rs` of those
//! crates declared.

use std::path::Path;

/// The folders whose `main.rs` is their crate's one test binary.
const SUITE_DIRS: [&str; 5] = [
    "tests/tests",
    "hubd/tests",
    "agentd/tests",
    "ctl/tests",
    "tests/pvesim/tests",
];

#[test]
fn every_suite_file_is_a_module_of_its_test_binary() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut missing = Vec::new();
    let mut seen = 0;
    for dir in SUITE_DIRS {
        let dir = workspace.join(dir);
        let main = std::fs::read_to_string(dir.join("main.rs")).unwrap();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
                continue;
            };
            if path.extension().is_none_or(|e| e != "rs") || name == "main" {
                continue;
            }
            seen += 1;
            if !main.lines().any(|l| l.trim() == format!("mod {name};")) {
                missing.push(path.display().to_string());
            }
        }
    }
    assert!(seen > 100, "only {seen} suite files found");
    assert!(
        missing.is_empty(),
        "not declared in their folder's main.rs, so never built: {missing:?}"
    );
}
