//! The kinds of id the hub resolves from a typed prefix ([`super::id_lookup`]) and the
//! candidates an ambiguous one lists: plain data at the bottom of the store, so its error type
//! can name them without importing the statements.

use uuid::Uuid;

/// A kind of id the hub resolves from a prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    /// An enrolled host (`hosts.host_id`).
    Host,
    /// A job, of any host (`jobs.job_id`; job ids are unique across hosts).
    Job,
}

impl IdKind {
    /// The kind as messages name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::Job => "job",
        }
    }

    /// The ids of this kind starting with `?1` (a `LIKE` pattern), in order, at most `?2`, each
    /// with its name.
    pub(super) fn statement(self) -> &'static str {
        match self {
            Self::Host => {
                "SELECT host_id, hostname FROM hosts WHERE host_id LIKE ?1
                 ORDER BY host_id LIMIT ?2"
            }
            Self::Job => {
                "SELECT j.job_id, j.kind || ' on ' || h.hostname FROM jobs j
                 JOIN hosts h ON h.host_id = j.host_id
                 WHERE j.job_id LIKE ?1 ORDER BY j.job_id LIMIT ?2"
            }
        }
    }
}

/// One id an ambiguous prefix matches, with its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdCandidate {
    /// The whole id.
    pub id: Uuid,
    /// What it names: a hostname, `kind on hostname` for a job.
    pub name: String,
}

impl std::fmt::Display for IdKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Display for IdCandidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.id, self.name)
    }
}

/// The candidates as a message lists them: `id (name), …`, and `and more` when there are.
pub(super) fn listed(candidates: &[IdCandidate], more: bool) -> String {
    let mut text = candidates
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if more {
        text.push_str(", and more");
    }
    text
}
