//! Golden archives an operator named in a signed `bosun.golden/v1` document (DESIGN §5:
//! restored only while "its signer is still in `allowed_signers`").
//!
//! [`admit_signed`] journals such an archive the first time a desired state carries its
//! document: the document must name exactly the desired volid and hash, cover this host and
//! this moment, carry a signature an allowed operator made in `bosun-golden@v1`, and the
//! helper must read that hash from the file. The journal keeps the exact signed bytes, the
//! signature and the signer ([`GoldenSignature`]). [`still_covers`] runs before every later
//! use of the record, whether or not the desired state still carries the document.
//!
//! Both also hold the document's serial against the highest this host holds
//! ([`GoldenUse::golden_serial`], decision 0092): a document the operator has since replaced
//! with a higher serial neither is admitted nor seeds another guest, though its record stays
//! (the provenance of the guests already made from it, which nothing here touches).

use bosun_proto::desired::GoldenArchive;
use bosun_proto::golden::{GOLDEN_NAMESPACE, GoldenDocument, check_serial};
use jiff::Timestamp;
use uuid::Uuid;

use super::{ArchiveHasher, GoldenRefusal, fresh_hash};
use crate::data::backup::proof::archive_name;
use crate::ops::journal::{GoldenRecord, GoldenSignature, GoldenSource, JournalHandle};
use crate::trust::signing::{
    AllowedSigners, AllowedSignersError, VerifiedSigner, verify_signature,
};

/// Where and when a golden archive is about to be used: a signed document is held to this
/// host and this moment every time, not only when it was admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoldenUse {
    /// This host's id (a document bound to another host covers nothing here).
    pub host_id: Uuid,
    /// The clock's time (a document past its `expires_at` covers nothing).
    pub now: Timestamp,
    /// The highest serial of a golden document this host holds (one below it covers
    /// nothing).
    pub golden_serial: u64,
    /// The highest serial of a golden recipe this host holds (a build of a recipe below it
    /// seeds nothing).
    pub recipe_serial: u64,
}

/// What [`still_covers`] found: the signer it verified against and the document's serial.
#[derive(Debug)]
pub struct Covered {
    /// The operator whose signature verified.
    pub signer: VerifiedSigner,
    /// The document's serial (0 for one signed before serials).
    pub serial: u64,
}

/// Journals the archive an operator named in `golden.signed`, once the document covers
/// `at`, its signature checks out against `signers` and the file's fresh hash is the signed
/// one. Does nothing when there is no signed document, when the journal holds this volid
/// and hash as built by this host's helper, or when it holds them with this very signed
/// document (whose signature [`still_covers`] checks again on use). Another document for a
/// journaled archive (re-signed by another operator, say) is admitted on its own merits and
/// replaces the journaled one.
pub async fn admit_signed<H: ArchiveHasher>(
    journal: &JournalHandle,
    hasher: Option<&H>,
    signers: impl FnOnce() -> Result<AllowedSigners, AllowedSignersError>,
    at: GoldenUse,
    golden: &GoldenArchive,
) -> Result<(), GoldenRefusal> {
    let Some(signed) = &golden.signed else {
        return Ok(());
    };
    let volid = golden.volid.clone();
    let bad = |reason: String| GoldenRefusal::BadSignedDocument {
        volid: volid.clone(),
        reason,
    };
    let bytes = signed.golden_bytes().map_err(|e| bad(e.to_string()))?;
    let known = journal
        .golden(volid.clone())
        .await
        .map_err(|source| GoldenRefusal::Journal {
            volid: volid.clone(),
            source,
        })?;
    if let Some(known) = known
        && known.sha256.eq_ignore_ascii_case(&golden.sha256)
    {
        match known.source {
            GoldenSource::Built => return Ok(()),
            GoldenSource::Signed(s) if s.document == bytes && s.signature == signed.signature => {
                return Ok(());
            }
            GoldenSource::Signed(_) => {}
        }
    }
    let document = signed.golden().map_err(|e| bad(e.to_string()))?;
    if document.volid != golden.volid || !document.sha256.eq_ignore_ascii_case(&golden.sha256) {
        return Err(bad("it names another archive or hash".into()));
    }
    let name = archive_name(&volid).ok_or_else(|| GoldenRefusal::NotAnArchive {
        volid: volid.clone(),
    })?;
    let signers = in_scope(&document, &volid, signers, at)?;
    let signer = verify_signature(
        &signers,
        GOLDEN_NAMESPACE,
        &bytes,
        &signed.signature,
        at.now,
    )
    .map_err(|source| GoldenRefusal::Signature {
        volid: volid.clone(),
        source,
    })?;
    let hasher = hasher.ok_or_else(|| GoldenRefusal::NoHelper {
        volid: volid.clone(),
    })?;
    let found = fresh_hash(hasher, &name, &volid).await?;
    if found != document.sha256 {
        return Err(GoldenRefusal::Changed {
            volid,
            found,
            journaled: document.sha256,
        });
    }
    let source = GoldenSource::Signed(GoldenSignature {
        document: bytes,
        signature: signed.signature.clone(),
        fingerprint: signer.fingerprint().to_owned(),
        principals: signer.principals().to_owned(),
    });
    journal
        .record_golden(volid.clone(), document.sha256.clone(), source)
        .await
        .map_err(|source| GoldenRefusal::Journal {
            volid: volid.clone(),
            source,
        })?;
    tracing::info!(
        volid,
        signer = %signer.fingerprint(),
        principals = signer.principals(),
        host_bound = document.host_id.is_some(),
        serial = document.serial(),
        expires_at = document.expires_at.map(tracing::field::display),
        "golden archive named in a signed document journaled"
    );
    Ok(())
}

/// The current `allowed_signers`, once `document` is found to cover this host at `at` and is
/// not older than the newest document this host holds: the checks admission and every later
/// use share before the signature is verified.
fn in_scope(
    document: &GoldenDocument,
    volid: &str,
    signers: impl FnOnce() -> Result<AllowedSigners, AllowedSignersError>,
    at: GoldenUse,
) -> Result<AllowedSigners, GoldenRefusal> {
    document
        .check_scope(at.host_id, at.now)
        .map_err(|source| GoldenRefusal::OutOfScope {
            volid: volid.to_owned(),
            source,
        })?;
    check_serial(document.serial(), at.golden_serial).map_err(|source| {
        GoldenRefusal::Superseded {
            volid: volid.to_owned(),
            source,
        }
    })?;
    signers().map_err(|source| GoldenRefusal::Signers {
        volid: volid.to_owned(),
        source,
    })
}

/// Whether the signed document behind the journaled `record` still lets this host use the
/// archive at `at`: it names the record's archive and hash, covers this host and moment
/// ([`GoldenDocument::check_scope`]), its serial is not below the newest this host holds,
/// and its signature verifies against `signers` as they are now. Gives the signer it
/// verified against and the document's serial.
///
/// The signature is verified again, over the journaled bytes, rather than the journaled
/// fingerprint looked up in the current file, because that is the one sound check:
/// - it is the same [`verify_signature`] that admitted the document, so everything an
///   `allowed_signers` line can say — the key being listed at all, its `namespaces=`
///   list, its `valid-after`/`valid-before` window, a FIDO key's touch — decides each use
///   exactly as it decided admission; a fingerprint lookup would be a second, partial copy
///   of those rules that could drift from the first (miss a namespace narrowed to jobs, or
///   an expired window);
/// - it proves rather than trusts: what is checked is an operator's signature over the
///   bytes, and the host binding and expiry are read from those signed bytes, not from
///   journal columns any code path could have written;
/// - it is cheap: one signature over at most 4 KiB, next to the helper hashing the whole
///   archive, which comes after it and is skipped when this refuses.
pub fn still_covers(
    record: &GoldenRecord,
    signature: &GoldenSignature,
    signers: impl FnOnce() -> Result<AllowedSigners, AllowedSignersError>,
    at: GoldenUse,
) -> Result<Covered, GoldenRefusal> {
    let volid = record.volid.clone();
    let bad = |reason: String| GoldenRefusal::BadSignedDocument {
        volid: volid.clone(),
        reason: format!("the journaled document: {reason}"),
    };
    let document: GoldenDocument = serde_json::from_slice(&signature.document)
        .map_err(|e| bad(format!("not a golden document: {e}")))?;
    document.validate().map_err(|e| bad(e.to_string()))?;
    if document.volid != record.volid || document.sha256 != record.sha256 {
        return Err(bad("it names another archive or hash".into()));
    }
    let signers = in_scope(&document, &volid, signers, at)?;
    let signer = verify_signature(
        &signers,
        GOLDEN_NAMESPACE,
        &signature.document,
        &signature.signature,
        at.now,
    )
    .map_err(|source| GoldenRefusal::SignerRevoked {
        volid,
        fingerprint: signature.fingerprint.clone(),
        principals: signature.principals.clone(),
        source: Box::new(source),
    })?;
    Ok(Covered {
        signer,
        serial: document.serial(),
    })
}

#[cfg(test)]
#[path = "signed_tests.rs"]
mod tests;
