//! How a job's spec and record are written as JSON (the log's submits, the
//! jobs table, snapshots): fields that older versions already read with a
//! default are left out when they hold it, and records written with them
//! (by earlier versions) still read the same.

use berth_scheduler::JobSpec;

use super::JobRecord;
use crate::command::Command;

/// Keys every older version reads with a default when absent, and so are
/// left out when they hold it.
const OMITTED_WHEN_DEFAULT: [&str; 20] = [
    "dependency",
    "begin_ms",
    "exclusive",
    "features",
    "reservation",
    "preemptible",
    "array",
    "array_job_id",
    "array_task_id",
    "array_task_count",
    "array_task_min",
    "array_task_max",
    "array_max_running",
    "time_limit_reached",
    "requeue_requested",
    "admin_hold",
    "restarts",
    "borrowed",
    "reclaims",
    "room_freed_ms",
];

fn plain_spec() -> JobSpec {
    JobSpec {
        name: "train".into(),
        user: "alice".into(),
        command: "python train.py".into(),
        cpus: 8,
        mem_mb: 32_768,
        ..JobSpec::default()
    }
}

fn record(spec: JobSpec) -> JobRecord {
    JobRecord::new_pending(7, spec, 1_000)
}

fn object(value: &serde_json::Value) -> &serde_json::Map<String, serde_json::Value> {
    value.as_object().expect("a JSON object")
}

#[test]
fn default_fields_are_left_out_of_a_record() {
    let value = serde_json::to_value(record(plain_spec())).expect("encodes");
    let job = object(&value["job"]);
    let spec = object(&job["spec"]);
    for key in OMITTED_WHEN_DEFAULT {
        assert!(
            !job.contains_key(key) && !spec.contains_key(key),
            "{key} is written though it holds its default"
        );
    }
    assert!(
        !job.contains_key("alloc"),
        "no allocation is written as null"
    );
    // Fields older versions require stay, default or not.
    for key in ["qos", "account", "partitions", "gres", "hold", "nice"] {
        assert!(
            spec.contains_key(key),
            "{key} is required by older versions"
        );
    }
    for key in ["end_ms", "exit_code", "exit_signal", "cancel_requested"] {
        assert!(job.contains_key(key), "{key} is required by older versions");
    }
}

#[test]
fn a_record_written_with_every_field_reads_the_same() {
    let original = record(plain_spec());
    let mut value = serde_json::to_value(&original).expect("encodes");
    // As earlier versions wrote it: every key, defaults included.
    let spec_defaults = serde_json::json!({
        "dependency": "", "begin_ms": 0, "exclusive": false, "features": [],
        "reservation": "", "preemptible": false, "array": "", "array_job_id": 0,
        "array_task_id": 0, "array_task_count": 0, "array_task_min": 0,
        "array_task_max": 0, "array_max_running": 0
    });
    let job_defaults = serde_json::json!({
        "alloc": null, "time_limit_reached": false, "requeue_requested": false,
        "admin_hold": false, "restarts": 0, "borrowed": false, "reclaims": 0,
        "room_freed_ms": 0
    });
    let job = value["job"].as_object_mut().expect("a JSON object");
    job.extend(object(&job_defaults).clone());
    let spec = job["spec"].as_object_mut().expect("a JSON object");
    spec.extend(object(&spec_defaults).clone());
    let read: JobRecord = serde_json::from_value(value).expect("decodes");
    assert_eq!(read, original);
}

#[test]
fn values_other_than_the_default_are_kept() {
    let spec = JobSpec {
        dependency: "afterok:3".into(),
        begin_ms: 5,
        exclusive: true,
        features: vec!["ib".into()],
        reservation: "maint".into(),
        preemptible: true,
        array: "0-3".into(),
        array_job_id: 4,
        array_task_id: 1,
        array_task_count: 4,
        array_task_min: 0,
        array_task_max: 3,
        array_max_running: 2,
        ..plain_spec()
    };
    let mut original = record(spec);
    original.job.time_limit_reached = true;
    original.job.requeue_requested = true;
    original.job.admin_hold = true;
    original.job.restarts = 2;
    original.job.borrowed = true;
    original.job.reclaims = 1;
    original.job.room_freed_ms = 9;
    let bytes = serde_json::to_vec(&original).expect("encodes");
    let read: JobRecord = serde_json::from_slice(&bytes).expect("decodes");
    assert_eq!(read, original);
}

#[test]
fn a_submit_entry_is_smaller_without_the_defaults() {
    let command = Command::SubmitJob {
        request_id: "r1".into(),
        spec: plain_spec(),
        now_ms: 1,
    };
    let json = serde_json::to_string(&command).expect("encodes");
    for key in OMITTED_WHEN_DEFAULT {
        assert!(!json.contains(&format!("\"{key}\"")), "{key} in {json}");
    }
    let read: Command = serde_json::from_str(&json).expect("decodes");
    assert_eq!(read, command);
}
