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
//! - [`reason`]: Slurm reason codes with their words.

pub mod fit;
pub mod model;
pub mod pass;
pub mod reason;

pub use fit::{fits, Lack};
pub use model::{
    Allocation, Host, HostState, Inventory, Job, JobId, JobSpec, JobState, Resources,
};
pub use pass::{schedule, PendingJob, Placement, Plan, Policy, Snapshot};
pub use reason::Reason;
