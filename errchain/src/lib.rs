//! `bosun-errchain`: [`error_chain`], an error and its whole source chain on one line, the one
//! printer every Bosun program uses where it handles an error (a log field, a refusal's
//! reason, a CLI's last line).
//!
//! A crate of its own so that every program, from the helper to the hub, prints errors the
//! same way without depending on anything else; `bosun-proto` keeps to wire data.

/// Formats `error` followed by each of its sources, joined by `": "`.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::error_chain;

    #[derive(Debug, thiserror::Error)]
    #[error("outer {name}")]
    struct Outer {
        name: &'static str,
        #[source]
        source: Middle,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("middle")]
    struct Middle(#[source] std::io::Error);

    #[test]
    fn every_source_follows_on_one_line() {
        let error = Outer {
            name: "a",
            source: Middle(std::io::Error::other("inner")),
        };
        assert_eq!(error_chain(&error), "outer a: middle: inner");
    }

    #[test]
    fn an_error_without_a_source_is_just_its_message() {
        assert_eq!(error_chain(&std::io::Error::other("alone")), "alone");
    }
}
