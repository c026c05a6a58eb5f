//! Worker tasks: UPIDs, task logs with PVE's final lines, and the task API handlers.

use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use parking_lot::Mutex;
use regex::Regex;
use serde_json::{Value, json};

use crate::api::{ApiError, Ctx, HandlerResult, Reply, data};
use crate::state::Shared;

/// The lines of a task log and the count of `WARN:` lines among them.
#[derive(Debug, Default)]
pub(crate) struct TaskLog {
    pub(crate) lines: Vec<String>,
    pub(crate) warnings: usize,
}

/// One worker task (running or finished).
#[derive(Debug, Clone)]
pub(crate) struct Task {
    pub(crate) upid: String,
    pub(crate) task_type: String,
    pub(crate) id: String,
    pub(crate) authid: String,
    pub(crate) pid: u32,
    pub(crate) pstart: u32,
    pub(crate) starttime: i64,
    /// Shared with the running body, so logging never needs the state lock.
    pub(crate) log: Arc<Mutex<TaskLog>>,
    pub(crate) exitstatus: Option<String>,
    pub(crate) endtime: Option<i64>,
}

impl Task {
    fn status_json(&self, node: &str) -> Value {
        let mut v = json!({
            "upid": self.upid,
            "node": node,
            "pid": self.pid,
            "pstart": self.pstart,
            "starttime": self.starttime,
            "type": self.task_type,
            "id": self.id,
            "status": if self.exitstatus.is_some() { "stopped" } else { "running" },
        });
        set_user(&mut v, &self.authid);
        if let Some(exit) = &self.exitstatus {
            v["exitstatus"] = json!(exit);
        }
        v
    }

    fn list_json(&self, node: &str) -> Value {
        let mut v = json!({
            "upid": self.upid,
            "node": node,
            "pid": self.pid,
            "pstart": self.pstart,
            "starttime": self.starttime,
            "type": self.task_type,
            "id": self.id,
        });
        set_user(&mut v, &self.authid);
        if let Some(exit) = &self.exitstatus {
            v["status"] = json!(exit);
            v["endtime"] = json!(self.endtime);
        }
        v
    }

    fn failed(&self) -> bool {
        self.exitstatus
            .as_deref()
            .is_some_and(|e| e != "OK" && !e.starts_with("WARNINGS: "))
    }

    /// Whether `authid` owns the task (a user also owns its tokens' tasks).
    fn owned_by(&self, authid: &str) -> bool {
        self.authid == authid
            || (!authid.contains('!')
                && self
                    .authid
                    .strip_prefix(authid)
                    .is_some_and(|r| r.starts_with('!')))
    }
}

/// For token tasks `user` is the user and `tokenid` the token name.
fn set_user(v: &mut Value, authid: &str) {
    match authid.split_once('!') {
        Some((user, token)) => {
            v["user"] = json!(user);
            v["tokenid"] = json!(token);
        }
        None => v["user"] = json!(authid),
    }
}

/// What a task body can do: log, warn, wait its duration, and hit an injected failure.
#[derive(Debug, Clone)]
pub(crate) struct TaskCtx {
    pub(crate) shared: Arc<Shared>,
    pub(crate) authid: String,
    log: Arc<Mutex<TaskLog>>,
    injected: Option<String>,
}

impl TaskCtx {
    pub(crate) fn log(&self, line: impl Into<String>) {
        self.log.lock().lines.push(line.into());
    }

    /// A `WARN: ` line, counted for `TASK WARNINGS: n`.
    pub(crate) fn warn(&self, msg: &str) {
        let mut log = self.log.lock();
        log.lines.push(format!("WARN: {msg}"));
        log.warnings += 1;
    }

    /// Waits a scaled real-time duration; fails with `received interrupt` on shutdown.
    pub(crate) async fn work(&self, real: Duration) -> Result<(), String> {
        if self.shared.sleep(real).await {
            Ok(())
        } else {
            Err("received interrupt".to_owned())
        }
    }

    /// The injected failure of this task, if the fault roll chose one.
    pub(crate) fn checkpoint(&self) -> Result<(), String> {
        match &self.injected {
            Some(msg) => Err(msg.clone()),
            None => Ok(()),
        }
    }

    pub(crate) fn injected(&self) -> Option<&str> {
        self.injected.as_deref()
    }
}

/// Starts a worker task and returns its UPID. `failure` is the message a failure injected by
/// `failed_task_rate` carries; the body decides where it surfaces (`TaskCtx::checkpoint`).
pub(crate) fn spawn<F, Fut>(
    shared: &Arc<Shared>,
    authid: &str,
    task_type: &str,
    id: &str,
    failure: String,
    body: F,
) -> String
where
    F: FnOnce(TaskCtx) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let starttime = shared.clock.epoch();
    let injected = {
        let faults = shared.state.lock().faults.clone();
        let applies = faults.failed_task_types.is_empty()
            || faults.failed_task_types.iter().any(|t| t == task_type);
        (applies && shared.roll(faults.failed_task_rate)).then_some(failure)
    };
    let log = Arc::new(Mutex::new(TaskLog::default()));
    let upid = {
        let mut st = shared.state.lock();
        st.next_pid = st.next_pid.wrapping_add(1);
        let pid = st.next_pid;
        let pstart = 0x0100_0000_u32.wrapping_add(pid.wrapping_mul(7));
        let start_hex = u32::try_from(starttime).unwrap_or(u32::MAX);
        let upid = format!(
            "UPID:{}:{pid:08X}:{pstart:08X}:{start_hex:08X}:{task_type}:{id}:{authid}:",
            shared.node()
        );
        st.tasks.push(Task {
            upid: upid.clone(),
            task_type: task_type.to_owned(),
            id: id.to_owned(),
            authid: authid.to_owned(),
            pid,
            pstart,
            starttime,
            log: log.clone(),
            exitstatus: None,
            endtime: None,
        });
        upid
    };
    tracing::info!(upid = %upid, task_type, id, "task started");
    let ctx = TaskCtx {
        shared: shared.clone(),
        authid: authid.to_owned(),
        log,
        injected,
    };
    let shared2 = shared.clone();
    let upid2 = upid.clone();
    shared.tracker.spawn(async move {
        let result = body(ctx).await;
        finish(&shared2, &upid2, result);
    });
    upid
}

fn finish(shared: &Shared, upid: &str, result: Result<(), String>) {
    let mut st = shared.state.lock();
    let Some(task) = st.tasks.iter_mut().find(|t| t.upid == upid) else {
        return;
    };
    let mut log = task.log.lock();
    let (line, exit) = match result {
        Err(msg) => (
            format!("TASK ERROR: {msg}"),
            msg.trim_end().replace('\n', " "),
        ),
        Ok(()) if log.warnings > 0 => {
            let w = format!("WARNINGS: {}", log.warnings);
            (format!("TASK {w}"), w)
        }
        Ok(()) => ("TASK OK".to_owned(), "OK".to_owned()),
    };
    log.lines.push(line);
    drop(log);
    task.exitstatus = Some(exit);
    task.endtime = Some(shared.clock.epoch());
    tracing::info!(upid, exitstatus = ?task.exitstatus, "task finished");
}

static UPID_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^UPID:[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?:[0-9A-Fa-f]{8}:[0-9A-Fa-f]{8,9}:[0-9A-Fa-f]{8}:[^:\s/]+:[^:\s/]*:[^:\s/]+:$",
    )
    .expect("static regex is valid")
});

fn find_task(ctx: &Ctx) -> Result<Task, ApiError> {
    let upid = ctx.required("upid")?;
    if !UPID_RE.is_match(upid) {
        return Err(ApiError::param("upid", "unable to parse worker upid"));
    }
    let task = ctx
        .shared
        .state
        .lock()
        .tasks
        .iter()
        .find(|t| t.upid == upid)
        .cloned()
        .ok_or_else(|| ApiError::param("upid", "no such task"))?;
    if !task.owned_by(&ctx.authid) {
        ctx.require(&format!("/nodes/{}", ctx.node()), "Sys.Audit")?;
    }
    Ok(task)
}

/// `GET /nodes/{node}/tasks/{upid}/status`.
pub(crate) fn status(ctx: &Ctx) -> HandlerResult {
    let task = find_task(ctx)?;
    data(task.status_json(ctx.node()))
}

/// `GET /nodes/{node}/tasks/{upid}/log`.
pub(crate) fn log(ctx: &Ctx) -> HandlerResult {
    let task = find_task(ctx)?;
    let start: usize = ctx.get("start").and_then(|s| s.parse().ok()).unwrap_or(0);
    let limit: usize = ctx.get("limit").and_then(|s| s.parse().ok()).unwrap_or(50);
    let lines: Vec<String> = task.log.lock().lines.clone();
    let lines = if lines.is_empty() {
        vec!["no content".to_owned()]
    } else {
        lines
    };
    let total = lines.len();
    let take = if limit == 0 { usize::MAX } else { limit };
    let items: Vec<Value> = lines
        .iter()
        .enumerate()
        .skip(start)
        .take(take)
        .map(|(i, t)| json!({ "n": i + 1, "t": t }))
        .collect();
    Ok(Reply::DataWithTotal(Value::Array(items), total))
}

/// `GET /nodes/{node}/tasks`.
pub(crate) fn list(ctx: &Ctx) -> HandlerResult {
    let audit = ctx.has(&format!("/nodes/{}", ctx.node()), "Sys.Audit");
    let source = ctx.get("source").unwrap_or("archive");
    let start: usize = ctx.get("start").and_then(|s| s.parse().ok()).unwrap_or(0);
    let limit: usize = ctx.get("limit").and_then(|s| s.parse().ok()).unwrap_or(50);
    let since: Option<i64> = ctx.get("since").and_then(|s| s.parse().ok());
    let until: Option<i64> = ctx.get("until").and_then(|s| s.parse().ok());
    let mut tasks: Vec<Task> = ctx.shared.state.lock().tasks.clone();
    tasks.retain(|t| audit || t.owned_by(&ctx.authid));
    tasks.retain(|t| match source {
        "active" => t.exitstatus.is_none(),
        "all" => true,
        _ => t.exitstatus.is_some(),
    });
    if let Some(vmid) = ctx.get("vmid") {
        tasks.retain(|t| t.id == vmid);
    }
    if let Some(tf) = ctx.get("typefilter") {
        tasks.retain(|t| t.task_type == tf);
    }
    if let Some(uf) = ctx.get("userfilter") {
        tasks.retain(|t| t.authid.contains(uf));
    }
    if ctx.flag("errors") {
        tasks.retain(Task::failed);
    }
    tasks.retain(|t| {
        since.is_none_or(|s| t.starttime >= s) && until.is_none_or(|u| t.starttime <= u)
    });
    tasks.sort_by(|a, b| b.starttime.cmp(&a.starttime).then(b.pid.cmp(&a.pid)));
    let take = if limit == 0 { usize::MAX } else { limit };
    let items: Vec<Value> = tasks
        .iter()
        .skip(start)
        .take(take)
        .map(|t| t.list_json(ctx.node()))
        .collect();
    data(Value::Array(items))
}
