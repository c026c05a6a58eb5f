//! Acknowledging and silencing an open alert from the alerts page, as `bosunctl alerts ack`
//! and `bosunctl alerts silence` do it: the forms post to `POST /ui/alerts/ack` and
//! `POST /ui/alerts/silence`, which run the admin API's own logic
//! ([`crate::api::admin_alerts::acknowledge`], [`crate::api::admin_alerts::silence`]) as the
//! session's operator token, so the event each writes (`alert_acknowledged`,
//! `alert_silenced`) names the token as `by` exactly as the CLI's call does.
//!
//! A post must come from this hub's own pages (`Origin` or `Sec-Fetch-Site`, as the login) and
//! carry the session's form token (made at login, compared in constant time), so neither
//! another site nor a page that merely holds the cookie can make one. Only `operator` and
//! `admin` tokens may: a viewer sees the controls disabled, and its post is refused here too.
//! The body is bounded ([`MAX_TRIAGE_BODY`]).

use axum::extract::{Request, State};
use axum::response::{IntoResponse as _, Redirect, Response};
use bosun_proto::admin::{AlertKind, OpenAlert};
use bosun_proto::alert_triage::{AckAlert, CreateSilence};
use bosun_proto::operator_token::Role;
use maud::{Markup, html};
use serde::Deserialize;
use uuid::Uuid;

use super::Ui;
use super::error::UiError;
use super::login::{read_form, same_origin};
use super::session::Acting;
use crate::api::admin_alerts;

/// Largest triage form read: the subject (512 bytes) and note (500) percent-encoded, and the
/// rest.
pub const MAX_TRIAGE_BODY: usize = 8 * 1024;

/// The silences the form offers, in hours, and their labels; the admin API takes any length
/// from a minute to 30 days, the form the usual few.
const SILENCE_HOURS: [(u32, &str); 4] = [
    (1, "1 hour"),
    (4, "4 hours"),
    (24, "1 day"),
    (168, "7 days"),
];

/// The acknowledgement form's fields.
#[derive(Debug, Deserialize)]
struct AckForm {
    /// Absent reads as empty, which matches no session's token: refused as a wrong one.
    #[serde(default)]
    csrf: String,
    host_id: Uuid,
    kind: AlertKind,
    subject: String,
    note: String,
}

/// The silence form's fields.
#[derive(Debug, Deserialize)]
struct SilenceForm {
    #[serde(default)]
    csrf: String,
    host_id: Uuid,
    kind: AlertKind,
    subject: String,
    hours: u32,
    reason: String,
}

/// The checks every triage post passes before its form is read: this hub's origin, a role
/// that may triage. The form token is checked once the form is read ([`form_token`]).
fn allowed(acting: &Acting, request: &Request, action: &'static str) -> Result<(), UiError> {
    same_origin(request.headers(), request.uri())?;
    if !acting.may_triage() {
        tracing::warn!(
            token = %acting.name,
            role = acting.role.as_str(),
            action,
            "dashboard triage refused: the token's role is too low"
        );
        return Err(UiError::Forbidden {
            token: acting.name.clone(),
            role: acting.role,
            needed: Role::Operator,
            action,
        });
    }
    Ok(())
}

fn form_token(acting: &Acting, presented: &str, action: &'static str) -> Result<(), UiError> {
    if acting.csrf.matches(presented) {
        return Ok(());
    }
    tracing::warn!(token = %acting.name, action, "dashboard triage refused: wrong form token");
    Err(UiError::FormToken)
}

/// `POST /ui/alerts/ack`: acknowledges the open alert the form names; back to the alerts page.
pub(crate) async fn ack(
    State(ui): State<Ui>,
    acting: Acting,
    request: Request,
) -> Result<Response, UiError> {
    allowed(&acting, &request, "acknowledging an alert")?;
    let form: AckForm = read_form(request, MAX_TRIAGE_BODY, "acknowledgement").await?;
    form_token(&acting, &form.csrf, "acknowledging an alert")?;
    let request = AckAlert {
        host_id: form.host_id,
        kind: form.kind,
        subject: form.subject,
        note: form.note,
    };
    crate::actor::scope(
        acting.name.clone(),
        admin_alerts::acknowledge(&ui.hub, request),
    )
    .await
    .map_err(UiError::Api)?;
    Ok(Redirect::to("/ui/alerts").into_response())
}

/// `POST /ui/alerts/silence`: silences the host's alerts of the form's kind and subject for
/// the hours it names; back to the alerts page.
pub(crate) async fn silence(
    State(ui): State<Ui>,
    acting: Acting,
    request: Request,
) -> Result<Response, UiError> {
    allowed(&acting, &request, "silencing an alert")?;
    let form: SilenceForm = read_form(request, MAX_TRIAGE_BODY, "silence").await?;
    form_token(&acting, &form.csrf, "silencing an alert")?;
    let Some(&(hours, _)) = SILENCE_HOURS.iter().find(|(h, _)| *h == form.hours) else {
        return Err(UiError::BadRequest {
            message: format!(
                "a silence from the dashboard lasts 1, 4, 24 or 168 hours, not {}",
                form.hours
            ),
        });
    };
    let request = CreateSilence {
        host_id: form.host_id,
        kind: Some(form.kind),
        subject: Some(form.subject),
        duration_seconds: hours * 3600,
        reason: form.reason,
    };
    crate::actor::scope(acting.name.clone(), admin_alerts::silence(&ui.hub, request))
        .await
        .map_err(UiError::Api)?;
    Ok(Redirect::to("/ui/alerts").into_response())
}

/// The controls of one open alert on the alerts page: acknowledge with a note, silence for a
/// while with a reason. A viewer sees them disabled, with why.
pub(crate) fn controls(alert: &OpenAlert, acting: &Acting) -> Markup {
    let off = !acting.may_triage();
    let hidden = html! {
        input type="hidden" name="csrf" value=(acting.csrf.value());
        input type="hidden" name="host_id" value=(alert.host_id);
        input type="hidden" name="kind" value=(alert.kind.as_str());
        input type="hidden" name="subject" value=(alert.subject);
    };
    html! {
        div class="triage" {
            @if alert.acknowledged.is_none() {
                form method="post" action="/ui/alerts/ack" class="ack" {
                    (hidden)
                    input type="text" name="note" required maxlength="500"
                        placeholder="what you are doing about it" aria-label="Note" disabled[off];
                    " " button type="submit" disabled[off] { "Acknowledge" }
                }
            }
            @if alert.silenced_by.is_none() {
                form method="post" action="/ui/alerts/silence" class="silence" {
                    (hidden)
                    select name="hours" aria-label="For" disabled[off] {
                        @for (hours, label) in SILENCE_HOURS {
                            option value=(hours) { (label) }
                        }
                    }
                    " " input type="text" name="reason" required maxlength="500"
                        placeholder="why" aria-label="Reason" disabled[off];
                    " " button type="submit" disabled[off] { "Silence" }
                }
            }
            @if off {
                p class="muted" { "A viewer token cannot acknowledge or silence: log in with an operator token." }
            }
        }
    }
}
