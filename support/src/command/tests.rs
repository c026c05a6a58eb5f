use super::*;

fn parse(line: &str) -> Result<Option<Command>, ParseError> {
    Command::parse(line)
}

#[test]
fn the_closed_set_parses() {
    assert_eq!(parse("status"), Ok(Some(Command::Status)));
    assert_eq!(parse("  help \n"), Ok(Some(Command::Help)));
    assert_eq!(parse(""), Ok(None));
    assert_eq!(
        parse("restart agent"),
        Ok(Some(Command::Restart(Target::Agent)))
    );
    assert_eq!(
        parse("logs update-gate --lines 50"),
        Ok(Some(Command::Logs {
            unit: Unit::UpdateGate,
            lines: 50
        }))
    );
    assert_eq!(
        parse("guest-config 101"),
        Ok(Some(Command::GuestConfig { vmid: 101 }))
    );
}

#[test]
fn injection_and_pager_escapes_are_refused_before_any_effect() {
    for line in [
        "logs agent; sh",
        "logs agent | less",
        "status && id",
        "guests $(id)",
        "logs agent `id`",
        "!sh",
        "logs agent --lines 5\0",
        "guest-config ../../etc/shadow",
    ] {
        assert_eq!(parse(line), Err(ParseError::BadCharacter), "{line:?}");
    }
}

#[test]
fn unknown_commands_units_and_arguments_are_refused() {
    assert!(matches!(
        parse("pct enter 101"),
        Err(ParseError::UnknownCommand { .. })
    ));
    assert!(matches!(
        parse("sh"),
        Err(ParseError::UnknownCommand { .. })
    ));
    assert!(matches!(
        parse("logs sshd"),
        Err(ParseError::UnknownUnit { .. })
    ));
    assert!(matches!(
        parse("restart helper"),
        Err(ParseError::NotRestartable { .. })
    ));
    assert!(matches!(
        parse("logs agent --lines 0"),
        Err(ParseError::BadNumber { .. })
    ));
    assert!(matches!(
        parse("logs agent --lines 99999999999"),
        Err(ParseError::BadNumber { .. })
    ));
    assert!(matches!(
        parse("logs agent --since yesterday"),
        Err(ParseError::Usage { .. })
    ));
    assert!(matches!(
        parse("guest-config 1"),
        Err(ParseError::BadNumber { .. })
    ));
    assert!(matches!(parse("status now"), Err(ParseError::Usage { .. })));
}

#[test]
fn a_huge_line_is_refused_with_its_length() {
    let line = "a".repeat(MAX_LINE + 1);
    assert_eq!(
        parse(&line),
        Err(ParseError::TooLong {
            len: MAX_LINE + 1,
            max: MAX_LINE
        })
    );
}

#[test]
fn every_command_line_is_absolute_and_pagerless() {
    let all = [
        Command::Status,
        Command::Restart(Target::HelperSocket),
        Command::Logs {
            unit: Unit::Helper,
            lines: 3,
        },
        Command::Guests,
        Command::GuestConfig { vmid: 100 },
    ];
    for c in all {
        let argv = c.argv().expect("runs something");
        assert!(argv[0].starts_with('/'), "{argv:?}");
        if argv[0].ends_with("ctl") && argv.iter().any(|a| a == "status") {
            assert!(argv.iter().any(|a| a == "--no-pager"));
        }
        if argv[0].ends_with("journalctl") {
            assert!(argv.iter().any(|a| a == "--no-pager"));
        }
    }
    assert_eq!(Command::Help.argv(), None);
}

#[test]
fn only_a_command_touching_a_guest_names_one() {
    assert_eq!(
        parse("guest-config 101").unwrap().unwrap().guest(),
        Some(101)
    );
    for host_level in [
        "status",
        "guests",
        "restart agent",
        "logs helper",
        "help",
        "exit",
    ] {
        assert_eq!(
            parse(host_level).unwrap().unwrap().guest(),
            None,
            "{host_level}"
        );
    }
}
