//! Validation errors shared by every document.

/// Why a document was refused. Every variant names the field (a dotted path such as
/// `guests[2].guest_id`) so the caller can point at the exact problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// The `schema` field does not name the expected document version.
    #[error("field `schema`: expected `{expected}`, found `{found}`")]
    WrongSchema {
        /// The schema this document type accepts.
        expected: &'static str,
        /// The schema the document declared.
        found: String,
    },
    /// A required string is empty or blank.
    #[error("field `{field}` must not be empty")]
    Empty {
        /// Dotted path of the field.
        field: String,
    },
    /// A value is longer than allowed.
    #[error("field `{field}` is {len} long, the limit is {max}")]
    TooLong {
        /// Dotted path of the field.
        field: String,
        /// Actual length (bytes or items).
        len: usize,
        /// Allowed maximum.
        max: usize,
    },
    /// A number is outside its allowed range.
    #[error("field `{field}` = {value} is outside {min}..={max}")]
    OutOfRange {
        /// Dotted path of the field.
        field: String,
        /// The offending value.
        value: i128,
        /// Smallest allowed value.
        min: i128,
        /// Largest allowed value.
        max: i128,
    },
    /// Two entries share a value that must be unique.
    #[error("field `{field}` repeats `{value}`")]
    Duplicate {
        /// Dotted path of the field.
        field: String,
        /// The repeated value.
        value: String,
    },
    /// A value has the wrong shape (free-form reason).
    #[error("field `{field}` is invalid: {reason}")]
    Invalid {
        /// Dotted path of the field.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl ValidationError {
    /// The dotted path of the field this error is about.
    pub fn field(&self) -> &str {
        match self {
            Self::WrongSchema { .. } => "schema",
            Self::Empty { field }
            | Self::TooLong { field, .. }
            | Self::OutOfRange { field, .. }
            | Self::Duplicate { field, .. }
            | Self::Invalid { field, .. } => field,
        }
    }
}

/// Checks the `schema` field.
pub(crate) fn schema(found: &str, expected: &'static str) -> Result<(), ValidationError> {
    if found == expected {
        Ok(())
    } else {
        Err(ValidationError::WrongSchema {
            expected,
            found: found.to_owned(),
        })
    }
}

/// Checks that a string is non-blank and at most `max` bytes.
pub(crate) fn text(
    field: impl Fn() -> String,
    value: &str,
    max: usize,
) -> Result<(), ValidationError> {
    if value.trim().is_empty() {
        return Err(ValidationError::Empty { field: field() });
    }
    if value.len() > max {
        return Err(ValidationError::TooLong {
            field: field(),
            len: value.len(),
            max,
        });
    }
    if value.chars().any(crate::inert::is_control) {
        return Err(ValidationError::Invalid {
            field: field(),
            reason: "contains control characters".to_owned(),
        });
    }
    Ok(())
}

/// Checks a calendar event: short text that [`CalendarEvent::parse`] accepts.
///
/// [`CalendarEvent::parse`]: crate::calendar::CalendarEvent::parse
pub(crate) fn calendar_event(
    field: impl Fn() -> String,
    value: &str,
) -> Result<(), ValidationError> {
    text(&field, value, 128)?;
    crate::calendar::CalendarEvent::parse(value).map_err(|e| ValidationError::Invalid {
        field: field(),
        reason: e.reason.to_owned(),
    })?;
    Ok(())
}

/// Checks an identifier: 1..=`max` bytes of `[A-Za-z0-9._-]`.
pub(crate) fn ident(
    field: impl Fn() -> String,
    value: &str,
    max: usize,
) -> Result<(), ValidationError> {
    text(&field, value, max)?;
    if let Some(bad) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(ValidationError::Invalid {
            field: field(),
            reason: format!("character {bad:?} is not allowed (use A-Z a-z 0-9 . _ -)"),
        });
    }
    Ok(())
}

/// Checks that an integer lies in `min..=max`.
pub(crate) fn range<T>(
    field: impl Fn() -> String,
    value: T,
    min: T,
    max: T,
) -> Result<(), ValidationError>
where
    T: PartialOrd + Copy + Into<i128>,
{
    if value < min || value > max {
        return Err(ValidationError::OutOfRange {
            field: field(),
            value: value.into(),
            min: min.into(),
            max: max.into(),
        });
    }
    Ok(())
}

/// Checks that a list has at most `max` items.
pub(crate) fn count(field: &str, len: usize, max: usize) -> Result<(), ValidationError> {
    if len > max {
        return Err(ValidationError::TooLong {
            field: field.to_owned(),
            len,
            max,
        });
    }
    Ok(())
}

/// Whether `text` is a pin as Bosun writes one: `spki:` and 64 lowercase hex digits (a key
/// pin), or 64 lowercase hex digits (a certificate fingerprint).
pub fn is_pin(text: &str) -> bool {
    let hex = text.strip_prefix("spki:").unwrap_or(text);
    hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Puts `outer.` in front of the field an inner document complained about.
pub(crate) fn prefix(outer: &str, err: ValidationError) -> ValidationError {
    match err {
        ValidationError::WrongSchema { expected, found } => ValidationError::Invalid {
            field: format!("{outer}.schema"),
            reason: format!("expected `{expected}`, found `{found}`"),
        },
        ValidationError::Empty { field } => ValidationError::Empty {
            field: format!("{outer}.{field}"),
        },
        ValidationError::TooLong { field, len, max } => ValidationError::TooLong {
            field: format!("{outer}.{field}"),
            len,
            max,
        },
        ValidationError::OutOfRange {
            field,
            value,
            min,
            max,
        } => ValidationError::OutOfRange {
            field: format!("{outer}.{field}"),
            value,
            min,
            max,
        },
        ValidationError::Duplicate { field, value } => ValidationError::Duplicate {
            field: format!("{outer}.{field}"),
            value,
        },
        ValidationError::Invalid { field, reason } => ValidationError::Invalid {
            field: format!("{outer}.{field}"),
            reason,
        },
    }
}
