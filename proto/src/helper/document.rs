//! The document `push_bootstrap` writes into a guest, validated as it is read.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::types::{InvalidArgument, invalid};

/// Largest `bootstrap.json` the helper writes, in bytes.
pub const MAX_BOOTSTRAP_BYTES: usize = 16 * 1024;

/// The contents of `bootstrap.json`: one valid `bosun.bootstrap/v1` document
/// ([`crate::bootstrap::Bootstrap`], strict and validated). It carries the guest's API
/// token, so `Debug` shows only its size and errors never show the text.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct BootstrapDocument(String);

impl BootstrapDocument {
    /// Validates that `text` is one `bosun.bootstrap/v1` document of at most
    /// [`MAX_BOOTSTRAP_BYTES`].
    pub fn new(text: impl Into<String>) -> Result<Self, InvalidArgument> {
        let text = text.into();
        let shown = format!("<{} bytes>", text.len());
        if text.len() > MAX_BOOTSTRAP_BYTES {
            return Err(invalid("bootstrap document", &shown, "larger than 16 KiB"));
        }
        match serde_json::from_str::<crate::bootstrap::Bootstrap>(&text) {
            Ok(doc) if doc.validate().is_ok() => Ok(Self(text)),
            _ => Err(invalid(
                "bootstrap document",
                &shown,
                "not a valid bosun.bootstrap/v1 document",
            )),
        }
    }

    /// The document's bytes, to be written to disk and nowhere else.
    pub fn expose_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// Length in bytes (safe to log).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the document is empty (never true for a valid one).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for BootstrapDocument {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BootstrapDocument(<{} bytes redacted>)", self.0.len())
    }
}

impl TryFrom<String> for BootstrapDocument {
    type Error = InvalidArgument;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<BootstrapDocument> for String {
    fn from(value: BootstrapDocument) -> String {
        value.0
    }
}
