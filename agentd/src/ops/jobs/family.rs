//! A job family ([`JobFamily`]): the kinds that run the same way ([`super::kind::Runs`]).
//! A family says how it judges a claimed job, what its `accepted` step holds, how it
//! judges a resumed one again and how it carries one out; the opening every family shares
//! (refuse when the agent was not set up for it, journal the operation with its `accepted`
//! step, resume from that step) is written once here, over the small [`JobContext`] and
//! the family's own setup. Only the dispatch ([`super::dispatch`]) names the families.

use bosun_proto::job::JobDocument;
use bosun_pve::Pve;
use bosun_pve::PveQemu;
use serde::Serialize;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use super::check::JobRefusal;
use super::context::JobContext;
use super::error::JobError;
use super::kind::KindRow;
use crate::ops::journal::NewOperation;
use crate::ops::operation::OpJournal;
use crate::trust::signing::VerifiedSigner;

/// A job that passed its checks and whose nonce and job id the journal claimed.
#[derive(Debug)]
pub(super) struct Claimed {
    /// The signed document.
    pub(super) document: JobDocument,
    /// Who signed it.
    pub(super) signer: VerifiedSigner,
    /// The hub request that brought it.
    pub(super) request_id: Option<String>,
    /// Its kind's row.
    pub(super) row: KindRow,
}

/// Why a family did not accept a claimed job.
#[derive(Debug)]
pub(super) enum NotAccepted {
    /// Refused: audited, reported `rejected`, its run recorded as failed.
    Refused(JobRefusal),
    /// Not run at all (the family logged why): a document the checks guarantee against.
    Dropped,
}

/// The kinds that run the same way: what their `accepted` step holds, how a claimed job of
/// theirs is judged and carried out, how an interrupted one is judged again.
pub(super) trait JobFamily<P: Pve + PveQemu + 'static> {
    /// The job's typed parameters as its `accepted` step holds them: everything a resumed
    /// job needs to run again.
    type Accepted: Serialize + DeserializeOwned;
    /// What the agent was set up with for these kinds; without it they are refused (and a
    /// resumed one fails).
    type Setup;
    /// What judging a job found that carrying it out uses.
    type Work;
    /// What the agent lacks without the setup, as a resumed job's failure names it.
    const MISSING: &'static str;

    /// The job id the `accepted` step names.
    fn job_id(accepted: &Self::Accepted) -> String;

    /// The job's guest (vmid, guest id), when it acts on one.
    fn guest(accepted: &Self::Accepted) -> Option<(u32, Uuid)>;

    /// Who signed the job, as the `accepted` step records it.
    fn signer(accepted: &Self::Accepted) -> VerifiedSigner;

    /// The row a resumed job runs as: `row` (the one its operation kind names) unless the
    /// `accepted` step names another kind sharing that operation kind.
    fn row_of(row: KindRow, _accepted: &Self::Accepted) -> KindRow {
        row
    }

    /// Judges a claimed job: its `accepted` step and what carrying it out uses, or why not.
    async fn accept(
        context: &JobContext<P>,
        setup: &Self::Setup,
        job: &Claimed,
    ) -> Result<(Self::Accepted, Self::Work), NotAccepted>;

    /// Judges a job a crash interrupted again, from its `accepted` step.
    fn judge_again(
        setup: &Self::Setup,
        row: KindRow,
        accepted: &Self::Accepted,
    ) -> Result<Self::Work, JobError>;

    /// Carries out an accepted job and ends it ([`JobContext::conclude`]).
    async fn carry_out(
        context: &JobContext<P>,
        setup: &Self::Setup,
        op: OpJournal,
        row: KindRow,
        accepted: Self::Accepted,
        work: Self::Work,
        signer: &VerifiedSigner,
    );

    /// Judges a claimed job (a refusal is reported `rejected`), journals it as accepted
    /// and runs it to its end.
    async fn run(context: &JobContext<P>, setup: Option<&Self::Setup>, job: Claimed) {
        let job_id = job.document.job_id;
        let Some(setup) = setup else {
            let refusal = JobRefusal::UnsupportedKind {
                kind: job.row.name().to_owned(),
            };
            return context
                .refuse_claimed(job_id, &refusal, job.request_id)
                .await;
        };
        let (accepted, work) = match Self::accept(context, setup, &job).await {
            Ok(accepted) => accepted,
            Err(NotAccepted::Refused(refusal)) => {
                return context
                    .refuse_claimed(job_id, &refusal, job.request_id)
                    .await;
            }
            Err(NotAccepted::Dropped) => return,
        };
        let Claimed {
            signer,
            request_id,
            row,
            ..
        } = job;
        let guest = Self::guest(&accepted);
        let operation = NewOperation {
            kind: row.op,
            guest_id: guest.map(|(_, guest_id)| guest_id.to_string()),
            vmid: guest.map(|(vmid, _)| vmid),
            job_id: Some(job_id.to_string()),
            request_id,
        };
        let Some(op) = context.begin_accepted(operation, job_id, &accepted).await else {
            return;
        };
        Self::carry_out(context, setup, op, row, accepted, work, &signer).await;
    }

    /// Runs on a job a crash interrupted, from its `accepted` step (`row` is the row its
    /// operation kind names; the open step was closed already): judged again, then carried
    /// out, or ended failed with why not.
    async fn resume(
        context: &JobContext<P>,
        setup: Option<&Self::Setup>,
        op: OpJournal,
        row: KindRow,
        accepted: Self::Accepted,
    ) {
        let row = Self::row_of(row, &accepted);
        let judged = match setup {
            None => Err(JobError::NotSetUp {
                kind: row.name(),
                missing: Self::MISSING,
            }),
            Some(setup) => Self::judge_again(setup, row, &accepted).map(|work| (setup, work)),
        };
        match judged {
            Ok((setup, work)) => {
                let signer = Self::signer(&accepted);
                Self::carry_out(context, setup, op, row, accepted, work, &signer).await;
            }
            Err(error) => {
                let (job_id, guest) = (Self::job_id(&accepted), Self::guest(&accepted));
                context
                    .conclude(op, job_id, row.name(), guest, Err(error))
                    .await;
            }
        }
    }
}
