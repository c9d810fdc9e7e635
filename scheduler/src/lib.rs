//! Berth's scheduling policy as pure functions.
//!
//! Invariant 1 (ARCHITECTURE.md): nothing in this crate touches a clock, the
//! network, the disk or unseeded randomness. Time is an argument. The live
//! leader, the simulator, the tests and the benches all call [`schedule`].
//!
//! The crate is organised as:
//! - [`model`]: the resource model (hosts, jobs, requests, allocations);
//! - [`fit`]: whether a request fits a host, and what the host lacks if not;
//! - [`pass`]: one scheduling pass over a [`Snapshot`], producing a [`Plan`];
//! - [`profile`]: a host's free resources over time, for backfill;
//! - [`reason`]: Slurm reason codes with their words;
//! - [`sim`]: the deterministic simulator behind `berth sim` (pure: it
//!   takes text and returns text; the CLI reads the files).

pub mod fit;
pub mod model;
pub mod pass;
pub mod profile;
pub mod reason;
pub mod sim;

pub use fit::{fits, Lack};
pub use model::{Allocation, Host, HostState, Inventory, Job, JobId, JobSpec, JobState, Resources};
pub use pass::{
    need_on, schedule, GangPlacement, PendingJob, Placement, Plan, Policy, Reservation, RunningJob,
    Snapshot,
};
pub use reason::Reason;
