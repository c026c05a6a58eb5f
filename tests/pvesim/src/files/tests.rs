use super::*;

#[test]
fn canonical_paths_refuse_relative_and_dot_dot() {
    assert_eq!(canonical("/etc//ssh/./").as_deref(), Ok("/etc/ssh"));
    assert_eq!(canonical("/").as_deref(), Ok("/"));
    assert!(canonical("etc").is_err());
    assert!(canonical("/etc/../root").is_err());
    assert_eq!(parent("/etc"), "/");
    assert_eq!(parent("/etc/ssh/x"), "/etc/ssh");
    assert_eq!(name("/etc/ssh/x"), "x");
}

#[test]
fn write_needs_a_parent_and_truncates_keeping_mode_and_owner() {
    let mut tree = debian_template();
    assert_eq!(
        tree.write("/etc/bosun-bootstrap/x", b"a".to_vec(), 0o644),
        Err("No such file or directory")
    );
    tree.write("/etc/x", b"long content".to_vec(), 0o600)
        .expect("parent exists");
    tree.set_attrs("/etc/x", None, Some(1), Some(1));
    tree.write("/etc/x", b"new".to_vec(), 0o644)
        .expect("existing file");
    let file = tree.describe("/etc/x").expect("exists");
    assert_eq!(
        (file.content.as_slice(), file.mode, file.uid),
        (&b"new"[..], 0o600, 1)
    );
    assert_eq!(tree.write("/etc", Vec::new(), 0o644), Err("Is a directory"));
    assert_eq!(tree.remove_file("/etc"), Err("Is a directory"));
    assert_eq!(tree.remove_file("/etc/x"), Ok(true));
    assert_eq!(tree.remove_file("/etc/x"), Ok(false));
}

#[test]
fn mkdir_all_and_below_with_depth() {
    let mut tree = FileTree::default();
    tree.mkdir_all("/a/b/c", 0o700).expect("creates all");
    assert_eq!(tree.get("/a/b").map(|n| n.mode), Some(0o700));
    assert_eq!(tree.below("/a", 1), vec!["/a/b".to_owned()]);
    assert_eq!(tree.below("/a", 2).len(), 2);
    assert_eq!(tree.mkdir("/a/b", 0o755), Ok(false));
    tree.write("/a/f", Vec::new(), 0o644).expect("file");
    assert_eq!(tree.mkdir("/a/f", 0o755), Err("File exists"));
    assert_eq!(tree.mkdir("/a/f/g", 0o755), Err("Not a directory"));
}

#[test]
fn ids_resolve_from_the_guests_own_databases() {
    let tree = debian_template();
    assert_eq!(tree.lookup_id("root", "/etc/passwd"), Some(0));
    assert_eq!(tree.lookup_id("nogroup", "/etc/group"), Some(65534));
    assert_eq!(tree.lookup_id("1000", "/etc/passwd"), Some(1000));
    assert_eq!(tree.lookup_id("bosun", "/etc/passwd"), None);
}

#[test]
fn guest_files_travel_as_hex() {
    let tree = debian_template();
    let file = tree.describe("/etc/hostname").expect("seeded");
    let json = serde_json::to_value(&file).expect("serializes");
    assert_eq!(json["content"], hex::encode("localhost\n"));
    let back: GuestFile = serde_json::from_value(json).expect("round trip");
    assert_eq!(back, file);
}

#[test]
fn the_template_has_an_init_the_guest_can_exec() {
    let tree = debian_template();
    let init = tree.describe(INIT).expect("seeded");
    assert_eq!(
        (init.kind.as_str(), init.content.as_slice()),
        ("symlink", &b"/lib/systemd/systemd"[..])
    );
    assert_eq!(tree.resolve(INIT).as_deref(), Some("/lib/systemd/systemd"));
    assert!(tree.executable(INIT));
}

#[test]
fn resolve_follows_relative_and_absolute_links_and_stops_at_loops() {
    let mut tree = FileTree::default();
    tree.mkdir_all("/usr/lib/systemd", 0o755).expect("dirs");
    tree.write("/usr/lib/systemd/systemd", elf("systemd"), 0o755)
        .expect("file");
    tree.symlink("/lib", "usr/lib").expect("merged /usr");
    tree.mkdir_all("/usr/sbin", 0o755).expect("dirs");
    tree.symlink("/sbin", "usr/sbin").expect("merged /usr");
    tree.symlink("/usr/sbin/init", "../lib/systemd/systemd")
        .expect("relative link");
    assert_eq!(
        tree.resolve("/sbin/init").as_deref(),
        Some("/usr/lib/systemd/systemd")
    );
    assert!(tree.executable("/sbin/init"));
    // A dangling link, a file used as a directory and a loop resolve to nothing.
    tree.symlink("/usr/sbin/gone", "/lib/systemd/nothing")
        .expect("dangling link");
    assert_eq!(tree.resolve("/usr/sbin/gone"), None);
    assert!(!tree.executable("/usr/sbin/gone"));
    assert_eq!(tree.resolve("/usr/lib/systemd/systemd/x"), None);
    tree.symlink("/a", "/b").expect("link");
    tree.symlink("/b", "/a").expect("link");
    assert_eq!(tree.resolve("/a"), None);
    // Without an execute bit the file is there but cannot be exec'd.
    tree.set_attrs("/usr/lib/systemd/systemd", Some(0o644), None, None);
    assert!(!tree.executable("/sbin/init"));
}

#[test]
fn entries_rebuild_the_same_tree() {
    let mut tree = debian_template();
    tree.write("/root/.ssh-key", b"\x00\xffbinary".to_vec(), 0o600)
        .expect("write");
    tree.set_attrs("/root/.ssh-key", None, Some(1000), Some(1000));
    let entries = tree.entries();
    assert_eq!(entries[0].path, "/");
    let mut shuffled = entries.clone();
    shuffled.reverse();
    assert_eq!(FileTree::from_entries(shuffled), Ok(tree));
}

#[test]
fn entries_that_do_not_make_a_tree_are_refused() {
    let entry = |path: &str, kind: &str, mode: u32, content: &[u8]| GuestFile {
        path: path.to_owned(),
        kind: kind.to_owned(),
        mode,
        uid: 0,
        gid: 0,
        content: content.to_vec(),
    };
    let root = || entry("/", "dir", 0o755, b"");
    let cases: Vec<(Vec<GuestFile>, &str)> = vec![
        (vec![], "'/' is missing or not a directory"),
        (
            vec![entry("/", "file", 0o644, b"x")],
            "'/' is missing or not a directory",
        ),
        (
            vec![root(), entry("/etc/../x", "file", 0o644, b"")],
            "'/etc/../x' is not a canonical absolute path",
        ),
        (
            vec![root(), entry("etc", "dir", 0o755, b"")],
            "'etc' is not a canonical absolute path",
        ),
        (
            vec![root(), entry("/etc/", "dir", 0o755, b"")],
            "'/etc/' is not a canonical absolute path",
        ),
        (
            vec![root(), entry("/x", "file", 0o100_644, b"")],
            "'/x': mode 0o100644 has more than permission bits",
        ),
        (
            vec![root(), entry("/x", "fifo", 0o644, b"")],
            "'/x': unknown kind 'fifo'",
        ),
        (
            vec![root(), entry("/x", "symlink", 0o777, b"")],
            "'/x': a symlink needs a target",
        ),
        (
            vec![root(), entry("/x", "dir", 0o755, b"data")],
            "'/x': a directory has no content",
        ),
        (
            vec![
                root(),
                entry("/x", "dir", 0o755, b""),
                entry("/x", "dir", 0o755, b""),
            ],
            "'/x' is listed twice",
        ),
        (
            vec![root(), entry("/a/b", "file", 0o644, b"")],
            "the parent of '/a/b' is not a directory",
        ),
        (
            vec![
                root(),
                entry("/a", "file", 0o644, b""),
                entry("/a/b", "file", 0o644, b""),
            ],
            "the parent of '/a/b' is not a directory",
        ),
    ];
    for (entries, expected) in cases {
        assert_eq!(
            FileTree::from_entries(entries.clone()),
            Err(expected.to_owned()),
            "{entries:?}"
        );
    }
}
