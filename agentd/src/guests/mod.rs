//! The customer guests this host keeps: the [`reconcile`] loop (observe, plan, apply,
//! provision, replay) and the per-guest [`queue`] every mutation goes through; the
//! [`controller`] inside each guest and the [`golden_build`] of the image guests are
//! provisioned from; the [`localapi`] the controllers call, and the guests' [`credentials`]
//! (local-API tokens, bootstraps, the local API's certificate).

pub mod controller;
pub mod credentials;
pub mod golden_build;
pub mod localapi;
pub mod queue;
pub mod reconcile;
