//! `berthd store check DIR`: prints what a store holds and what is wrong
//! with it. The verification itself is `berth_raft_store::check`; this is
//! only the printer.

use std::fmt::Write as _;
use std::path::Path;

use berth_raft_store::CheckReport;

/// Checks the store at `dir` (a node's data_dir, or its `raft` folder) and
/// prints the report. Errors when the store cannot be read or is damaged.
pub fn run(dir: &Path) -> anyhow::Result<()> {
    // Accept the node's data_dir as well as the store inside it.
    let nested = berth_raft_store::store::store_path(dir);
    let path = if !dir.join("CURRENT").exists() && nested.join("CURRENT").exists() {
        nested
    } else {
        dir.to_path_buf()
    };
    let report = berth_raft_store::check(&path)?;
    print!("{}", render(&report));
    if report.is_ok() {
        Ok(())
    } else {
        anyhow::bail!(
            "the store at {} has {} problem(s); see above",
            path.display(),
            report.problems.len() as u64 + report.problems_not_listed
        )
    }
}

fn or_none<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "none".into())
}

/// The report as text, one fact a line.
pub fn render(r: &CheckReport) -> String {
    let mut s = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(s, "store           {}", r.path.display());
    let _ = writeln!(s, "format version  {}", or_none(r.format_version));
    let _ = writeln!(s, "vote            {}", or_none(r.vote));
    let _ = writeln!(s, "committed       {}", or_none(r.committed));
    let _ = writeln!(s, "last purged     {}", or_none(r.last_purged));
    let _ = writeln!(
        s,
        "log             {} entries, {} .. {}",
        r.log_entries,
        or_none(r.first_log_id),
        or_none(r.last_log_id)
    );
    let terms: Vec<String> = r
        .entries_per_term
        .iter()
        .map(|(t, n)| format!("{t}:{n}"))
        .collect();
    let _ = writeln!(
        s,
        "entries by term {}",
        if terms.is_empty() {
            "-".into()
        } else {
            terms.join(" ")
        }
    );
    let _ = writeln!(s, "last applied    {}", or_none(r.last_applied));
    let members = r
        .membership
        .as_ref()
        .map(|m| format!("{:?}", m.membership().voter_ids().collect::<Vec<_>>()))
        .unwrap_or_else(|| "none".into());
    let _ = writeln!(s, "voters          {members}");
    match r.counters {
        Some(c) => {
            let _ = writeln!(
                s,
                "next ids        job {}, allocation {}",
                c.next_job_id, c.next_alloc_id
            );
        }
        None => {
            let _ = writeln!(s, "next ids        none");
        }
    }
    let states: Vec<String> = r
        .jobs_by_state
        .iter()
        .map(|(k, n)| format!("{k}:{n}"))
        .collect();
    let _ = writeln!(
        s,
        "jobs            {}{}",
        r.jobs,
        if states.is_empty() {
            String::new()
        } else {
            format!(" ({})", states.join(" "))
        }
    );
    let _ = writeln!(s, "hosts           {}", r.hosts);
    let _ = writeln!(s, "request ids     {}", r.request_ids);
    match &r.snapshot {
        Some(snap) => {
            let _ = writeln!(
                s,
                "snapshot        {} (up to {})",
                snap.snapshot_id,
                or_none(snap.last_log_id)
            );
        }
        None => {
            let _ = writeln!(s, "snapshot        none");
        }
    }
    if r.is_ok() {
        let _ = writeln!(s, "status          OK");
    } else {
        let _ = writeln!(s, "status          DAMAGED");
        for p in &r.problems {
            let _ = writeln!(s, "  problem: {p}");
        }
        if r.problems_not_listed > 0 {
            let _ = writeln!(s, "  ... and {} more problem(s)", r.problems_not_listed);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_an_empty_store_and_refuses_a_damaged_one() {
        let dir = tempfile::TempDir::new().expect("tempdir");
        let store = berth_raft_store::store::store_path(dir.path());
        drop(berth_raft_store::open(&store).expect("create"));
        // The data_dir is accepted as well as the store folder.
        run(dir.path()).expect("an empty store checks OK");
        let report = berth_raft_store::check(&store).expect("check");
        let text = render(&report);
        assert!(text.contains("status          OK"), "{text}");
        let format = format!(
            "format version  {}",
            berth_raft_store::store::FORMAT_VERSION
        );
        assert!(text.contains(&format), "{text}");

        let not_a_store = tempfile::TempDir::new().expect("tempdir");
        let err = run(not_a_store.path()).expect_err("an empty directory is not a store");
        assert!(err.to_string().contains("no Berth store"), "{err}");
    }
}
