//! Signed one-shot jobs and the reversibility gate.
//!
//! - [`signature`]: parse the agent's OpenSSH `allowed_signers` file and verify
//!   a job's SSHSIG (namespace `bosun-job@v1`) over its exact bytes.
//! - [`gate`]: the one function every destroy/overwrite path passes through,
//!   deciding by action × authority × the journal's provenance.
//!
//! Still to come on top of these: the job document checks that need the
//! `bosun-proto` job type (`not_before`/`expires_at` with skew, host binding,
//! kind/target consistency), which then claim the job in the journal
//! (`Store::claim_job`: nonce seen once, job id run once) and build the
//! gate's `Authority::SignedJob` from the verified job.

mod allowed_signers;
pub mod gate;
pub mod signature;
