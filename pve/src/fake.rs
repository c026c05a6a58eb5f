//! A scripted fake of [`Pve`] and the tests of the provided methods (`wait_task`,
//! `restore_ct_next_id`, `backup_ct`, lock wait-out) that run on it.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use parking_lot::Mutex;

use super::*;

/// One scripted answer to a task status poll.
#[derive(Debug, Clone)]
enum Poll {
    Running,
    Stopped(&'static str),
    Busy,
}

#[derive(Debug, Default)]
struct Script {
    polls: BTreeMap<String, VecDeque<Poll>>,
    logs: BTreeMap<String, Vec<String>>,
    next_ids: VecDeque<u32>,
    taken: Vec<u32>,
    content: Vec<ContentItem>,
    upids: VecDeque<Upid>,
    status_calls: u32,
}

#[derive(Debug)]
struct FakePve {
    node: NodeName,
    policy: RetryPolicy,
    script: Mutex<Script>,
}

fn upid(n: u32, ty: &str) -> Upid {
    Upid::parse(&format!(
        "UPID:pve:{n:08X}:00000001:6650F1A2:{ty}:100:bosun@pve!agent:"
    ))
    .unwrap()
}

impl FakePve {
    fn new() -> Self {
        let mut policy = RetryPolicy::fast();
        policy.task_poll = Backoff {
            initial: Duration::from_millis(1),
            max: Duration::from_millis(2),
        };
        policy.lock_backoff = Backoff {
            initial: Duration::from_millis(1),
            max: Duration::from_millis(2),
        };
        policy.task_poll_errors = 3;
        policy.log_tail_lines = 2;
        Self {
            node: NodeName::new("pve").unwrap(),
            policy,
            script: Mutex::new(Script::default()),
        }
    }

    fn task(&self, upid: &Upid, polls: &[Poll], log: &[&str]) {
        let mut s = self.script.lock();
        s.polls
            .insert(upid.to_string(), polls.iter().cloned().collect());
        s.logs.insert(
            upid.to_string(),
            log.iter().map(|l| (*l).to_owned()).collect(),
        );
    }

    fn unscripted<T>(&self, op: Op) -> Result<T, PveError> {
        Err(PveError::NotImplemented {
            op,
            message: "not scripted in the fake".into(),
        })
    }
}

impl Pve for FakePve {
    fn node(&self) -> &NodeName {
        &self.node
    }
    fn retry_policy(&self) -> &RetryPolicy {
        &self.policy
    }
    async fn version(&self) -> Result<VersionInfo, PveError> {
        self.unscripted(Op::Version)
    }
    async fn nodes(&self) -> Result<Vec<NodeInfo>, PveError> {
        self.unscripted(Op::ListNodes)
    }
    async fn node_status(&self) -> Result<NodeStatus, PveError> {
        self.unscripted(Op::NodeStatus)
    }
    async fn list_disks(&self) -> Result<Vec<crate::NodeDisk>, PveError> {
        self.unscripted(Op::ListDisks)
    }
    async fn disk_smart(&self, _: &str) -> Result<crate::SmartData, PveError> {
        self.unscripted(Op::DiskSmart)
    }
    async fn thin_pools(&self) -> Result<Vec<crate::ThinPool>, PveError> {
        self.unscripted(Op::ListThinPools)
    }
    async fn network(&self) -> Result<Vec<crate::NetworkInterface>, PveError> {
        self.unscripted(Op::ListNetwork)
    }
    async fn zfs_pools(&self) -> Result<Vec<crate::ZfsPool>, PveError> {
        self.unscripted(Op::ListZfsPools)
    }
    async fn next_id(&self) -> Result<Vmid, PveError> {
        let id = self
            .script
            .lock()
            .next_ids
            .pop_front()
            .expect("next id scripted");
        Ok(Vmid::new(id).unwrap())
    }
    async fn cluster_guests(&self) -> Result<Vec<ClusterGuest>, PveError> {
        self.unscripted(Op::ClusterResources)
    }
    async fn list_cts(&self) -> Result<Vec<CtSummary>, PveError> {
        self.unscripted(Op::ListCts)
    }
    async fn ct_config(&self, _: Vmid) -> Result<CtConfig, PveError> {
        self.unscripted(Op::GetConfig)
    }
    async fn update_ct_config(&self, _: Vmid, _: &ConfigUpdate) -> Result<(), PveError> {
        self.unscripted(Op::UpdateConfig)
    }
    async fn ct_status(&self, _: Vmid) -> Result<CtStatus, PveError> {
        self.unscripted(Op::CtStatus)
    }
    async fn ct_interfaces(&self, _: Vmid) -> Result<Vec<CtInterface>, PveError> {
        self.unscripted(Op::CtInterfaces)
    }
    async fn start_ct(&self, _: Vmid) -> Result<Upid, PveError> {
        Ok(self.script.lock().upids.pop_front().expect("upid scripted"))
    }
    async fn stop_ct(&self, _: Vmid) -> Result<Upid, PveError> {
        self.unscripted(Op::StopCt)
    }
    async fn shutdown_ct(&self, _: Vmid, _: Option<u32>, _: bool) -> Result<Upid, PveError> {
        self.unscripted(Op::ShutdownCt)
    }
    async fn restore_ct(&self, request: &RestoreRequest) -> Result<Upid, PveError> {
        let mut s = self.script.lock();
        if s.taken.contains(&request.vmid.get()) {
            return Err(PveError::Api {
                op: Op::RestoreCt,
                vmid: Some(request.vmid),
                status: 500,
                message: format!("CT {} already exists on node 'pve'", request.vmid),
            });
        }
        s.taken.push(request.vmid.get());
        Ok(upid(request.vmid.get(), "vzrestore"))
    }
    async fn restore_ct_overwrite(&self, _: &RestoreRequest) -> Result<Upid, PveError> {
        self.unscripted(Op::RestoreCtOverwrite)
    }
    async fn destroy_ct(&self, _: Vmid, _: bool) -> Result<Upid, PveError> {
        self.unscripted(Op::DestroyCt)
    }
    async fn list_snapshots(&self, _: Vmid) -> Result<Vec<SnapshotInfo>, PveError> {
        self.unscripted(Op::ListSnapshots)
    }
    async fn create_snapshot(
        &self,
        _: Vmid,
        _: &SnapName,
        _: Option<&str>,
    ) -> Result<Upid, PveError> {
        self.unscripted(Op::CreateSnapshot)
    }
    async fn delete_snapshot(&self, _: Vmid, _: &SnapName) -> Result<Upid, PveError> {
        self.unscripted(Op::DeleteSnapshot)
    }
    async fn rollback_snapshot(&self, _: Vmid, _: &SnapName, _: bool) -> Result<Upid, PveError> {
        self.unscripted(Op::RollbackSnapshot)
    }
    async fn resize_disk(&self, _: Vmid, _: CtDisk, _: DiskSize) -> Result<Upid, PveError> {
        self.unscripted(Op::ResizeDisk)
    }
    async fn vzdump(&self, _: &VzdumpRequest) -> Result<Upid, PveError> {
        Ok(self.script.lock().upids.pop_front().expect("upid scripted"))
    }
    async fn list_storage(&self) -> Result<Vec<StorageInfo>, PveError> {
        self.unscripted(Op::ListStorage)
    }
    async fn storage_status(&self, _: &StorageId) -> Result<StorageInfo, PveError> {
        self.unscripted(Op::StorageStatus)
    }
    async fn create_storage(&self, _: &StorageCreate) -> Result<(), PveError> {
        self.unscripted(Op::CreateStorage)
    }
    async fn storage_config(
        &self,
        _: &StorageId,
    ) -> Result<serde_json::Map<String, serde_json::Value>, PveError> {
        self.unscripted(Op::StorageConfig)
    }
    async fn update_storage(&self, _: &StorageId, _: &StorageUpdate) -> Result<(), PveError> {
        self.unscripted(Op::UpdateStorage)
    }
    async fn delete_storage(&self, _: &StorageId) -> Result<(), PveError> {
        self.unscripted(Op::DeleteStorage)
    }
    async fn list_content(
        &self,
        _: &StorageId,
        filter: ContentFilter,
    ) -> Result<Vec<ContentItem>, PveError> {
        let want = filter.vmid.map(|v| u64::from(v.get()));
        Ok(self
            .script
            .lock()
            .content
            .iter()
            .filter(|c| want.is_none() || c.vmid == want)
            .cloned()
            .collect())
    }
    async fn delete_volume(&self, _: &VolumeId) -> Result<Option<Upid>, PveError> {
        self.unscripted(Op::DeleteVolume)
    }
    async fn volume_attributes(&self, _: &VolumeId) -> Result<VolumeAttributes, PveError> {
        self.unscripted(Op::VolumeAttributes)
    }
    async fn set_volume_notes(&self, _: &VolumeId, _: &str) -> Result<(), PveError> {
        self.unscripted(Op::SetVolumeNotes)
    }
    async fn extract_config(&self, _: &VolumeId) -> Result<String, PveError> {
        self.unscripted(Op::ExtractConfig)
    }
    async fn list_tasks(&self, _: TaskFilter) -> Result<Vec<TaskSummary>, PveError> {
        Ok(Vec::new())
    }
    async fn active_tasks(&self) -> Result<Vec<TaskSummary>, PveError> {
        Ok(Vec::new())
    }
    async fn task_status(&self, upid: &Upid) -> Result<TaskStatusInfo, PveError> {
        let mut s = self.script.lock();
        s.status_calls += 1;
        let poll = s
            .polls
            .get_mut(upid.as_str())
            .and_then(VecDeque::pop_front)
            .unwrap_or(Poll::Running);
        let (status, exit) = match poll {
            Poll::Running => ("running", None),
            Poll::Stopped(e) => ("stopped", Some(e.to_owned())),
            Poll::Busy => {
                return Err(PveError::Busy {
                    op: Op::TaskStatus,
                    vmid: None,
                    status: 596,
                    message: String::new(),
                });
            }
        };
        Ok(TaskStatusInfo {
            upid: upid.clone(),
            status: status.into(),
            exitstatus: exit,
            task_type: Some(upid.task_type().into()),
            id: None,
            user: None,
            tokenid: None,
            starttime: None,
        })
    }
    async fn ct_firewall(&self, _: Vmid) -> Result<GuestFirewall, PveError> {
        self.unscripted(Op::GetFirewall)
    }
    async fn set_ct_firewall(&self, _: Vmid, _: &FirewallUpdate) -> Result<(), PveError> {
        self.unscripted(Op::SetFirewall)
    }
    async fn task_log(&self, upid: &Upid, start: u64, limit: u64) -> Result<TaskLog, PveError> {
        let s = self.script.lock();
        let all = s.logs.get(upid.as_str()).cloned().unwrap_or_default();
        let lines: Vec<TaskLogLine> = all
            .iter()
            .enumerate()
            .skip(usize::try_from(start).unwrap())
            .take(usize::try_from(limit).unwrap())
            .map(|(i, t)| TaskLogLine {
                n: u64::try_from(i).unwrap() + 1,
                t: t.clone(),
            })
            .collect();
        Ok(TaskLog {
            total: u64::try_from(all.len()).unwrap(),
            lines,
        })
    }
}

#[tokio::test]
async fn wait_task_polls_until_ok() {
    let fake = FakePve::new();
    let u = upid(1, "vzstart");
    fake.task(
        &u,
        &[Poll::Running, Poll::Running, Poll::Stopped("OK")],
        &["TASK OK"],
    );
    let out = fake.wait_task(Op::StartCt, &u).await.unwrap();
    assert_eq!(out.warnings, 0);
    assert_eq!(fake.script.lock().status_calls, 3);
}

#[tokio::test]
async fn warnings_are_success_with_a_count() {
    let fake = FakePve::new();
    let u = upid(2, "vzrestore");
    fake.task(
        &u,
        &[Poll::Stopped("WARNINGS: 2")],
        &["WARN: a", "WARN: b", "TASK WARNINGS: 2"],
    );
    assert_eq!(fake.wait_task(Op::RestoreCt, &u).await.unwrap().warnings, 2);
}

#[tokio::test]
async fn a_failed_task_carries_its_log_tail() {
    let fake = FakePve::new();
    let u = upid(3, "vzstart");
    fake.task(
        &u,
        &[Poll::Running, Poll::Stopped("CT is locked (backup)")],
        &["starting", "checking", "TASK ERROR: CT is locked (backup)"],
    );
    match fake.wait_task(Op::StartCt, &u).await {
        Err(e @ PveError::TaskFailed { .. }) => {
            assert!(e.is_lock_contention());
            let PveError::TaskFailed {
                exitstatus,
                log_tail,
                upid: got,
                ..
            } = e
            else {
                unreachable!()
            };
            assert_eq!(exitstatus, "CT is locked (backup)");
            assert_eq!(
                log_tail,
                vec![
                    "checking".to_owned(),
                    "TASK ERROR: CT is locked (backup)".to_owned()
                ]
            );
            assert_eq!(got, u);
        }
        other => panic!("expected TaskFailed, got {other:?}"),
    }
}

#[tokio::test]
async fn transient_poll_errors_are_tolerated_up_to_the_bound() {
    let fake = FakePve::new();
    let u = upid(4, "vzdump");
    fake.task(
        &u,
        &[
            Poll::Busy,
            Poll::Busy,
            Poll::Running,
            Poll::Busy,
            Poll::Stopped("OK"),
        ],
        &[],
    );
    assert!(fake.wait_task(Op::Vzdump, &u).await.is_ok());

    let u = upid(5, "vzdump");
    fake.task(
        &u,
        &[
            Poll::Busy,
            Poll::Busy,
            Poll::Busy,
            Poll::Busy,
            Poll::Stopped("OK"),
        ],
        &[],
    );
    assert!(matches!(
        fake.wait_task(Op::Vzdump, &u).await,
        Err(PveError::Busy { .. })
    ));
}

#[tokio::test]
async fn waiting_gives_up_at_the_limit() {
    let mut fake = FakePve::new();
    fake.policy.task_wait_limit = Duration::from_millis(20);
    let u = upid(6, "vzdump");
    fake.task(&u, &[], &[]);
    assert!(matches!(
        fake.wait_task(Op::Vzdump, &u).await,
        Err(PveError::TaskWaitTimedOut { .. })
    ));
}

#[tokio::test]
async fn restore_takes_another_id_when_the_offered_one_was_claimed() {
    let fake = FakePve::new();
    {
        let mut s = fake.script.lock();
        s.next_ids.extend([100, 101]);
        s.taken.push(100);
    }
    let req = RestoreRequest::new(
        Vmid::new(100).unwrap(),
        VolumeId::new("local:backup/g.tar.zst").unwrap(),
        StorageId::new("local-lvm").unwrap(),
    );
    let (id, u) = fake.restore_ct_next_id(&req).await.unwrap();
    assert_eq!(id.get(), 101);
    assert_eq!(
        u.id(),
        "100",
        "fake UPIDs carry id 100; the pid encodes the vmid"
    );
    assert_eq!(u.pid(), 101);

    let fake = FakePve::new();
    {
        let mut s = fake.script.lock();
        s.next_ids.extend([100; 5]);
        s.taken.push(100);
    }
    assert!(matches!(
        fake.restore_ct_next_id(&req).await,
        Err(PveError::NoFreeVmid { attempts: 5, .. })
    ));
}

fn item(volid: &str, vmid: u64, ctime: u64) -> ContentItem {
    ContentItem {
        volid: volid.into(),
        content: Some("backup".into()),
        format: Some("tar.zst".into()),
        size: Some(1),
        ctime: Some(ctime),
        vmid: Some(vmid),
        subtype: Some("lxc".into()),
        notes: None,
        protected: false,
        encrypted: None,
    }
}

#[tokio::test]
async fn backup_volid_comes_from_the_log_or_else_the_listing() {
    let req = VzdumpRequest::new(Vmid::new(100).unwrap(), StorageId::new("local").unwrap());
    let fake = FakePve::new();
    let u = upid(7, "vzdump");
    fake.script.lock().upids.push_back(u.clone());
    fake.task(&u, &[Poll::Stopped("OK")], &["INFO: creating vzdump archive '/var/lib/vz/dump/vzdump-lxc-100-2026_05_01-10_00_00.tar.zst'", "TASK OK"]);
    let out = fake.backup_ct(&req).await.unwrap();
    assert_eq!(
        out.volid,
        "local:backup/vzdump-lxc-100-2026_05_01-10_00_00.tar.zst"
    );

    let fake = FakePve::new();
    let u = upid(8, "vzdump");
    let start = u64::try_from(u.starttime()).unwrap();
    {
        let mut s = fake.script.lock();
        s.upids.push_back(u.clone());
        s.content = vec![
            item("local:backup/old.tar.zst", 100, start - 100),
            item("local:backup/new.tar.zst", 100, start + 5),
            item("local:backup/other.tar.zst", 101, start + 9),
        ];
    }
    fake.task(
        &u,
        &[Poll::Stopped("OK")],
        &["INFO: Finished Backup of VM 100 (00:00:05)", "TASK OK"],
    );
    assert_eq!(
        fake.backup_ct(&req).await.unwrap().volid,
        "local:backup/new.tar.zst"
    );

    let fake = FakePve::new();
    let u = upid(9, "vzdump");
    fake.script.lock().upids.push_back(u.clone());
    fake.task(&u, &[Poll::Stopped("OK")], &["TASK OK"]);
    assert!(matches!(
        fake.backup_ct(&req).await,
        Err(PveError::BackupArchiveNotFound { .. })
    ));
}

#[tokio::test]
async fn a_task_refused_by_a_lock_is_issued_again() {
    let fake = FakePve::new();
    let (a, b) = (upid(10, "vzstart"), upid(11, "vzstart"));
    fake.script.lock().upids.extend([a.clone(), b.clone()]);
    fake.task(
        &a,
        &[Poll::Stopped("CT is locked (snapshot)")],
        &["TASK ERROR: CT is locked (snapshot)"],
    );
    fake.task(&b, &[Poll::Stopped("OK")], &["TASK OK"]);
    let id = Vmid::new(100).unwrap();
    let out = run_task_waiting_out_locks(&fake, Op::StartCt, || fake.start_ct(id))
        .await
        .unwrap();
    assert_eq!(out.upid, b);

    let fake = FakePve::new();
    let c = upid(12, "vzstart");
    fake.script.lock().upids.push_back(c.clone());
    fake.task(&c, &[Poll::Stopped("command 'lxc-start' failed")], &[]);
    let err = run_task_waiting_out_locks(&fake, Op::StartCt, || fake.start_ct(id))
        .await
        .unwrap_err();
    assert!(
        matches!(err, PveError::TaskFailed { .. }),
        "other failures are not retried"
    );
}
