//! Berth's scheduling policy as pure functions.
//!
//! Invariant 1 (ARCHITECTURE.md): nothing in this crate touches a clock, the
//! network, the disk or unseeded randomness. Time is an argument. The live
//! leader, the simulator, the tests and the benches all call [`schedule`].
//!
//! The crate is organised as:
//! - [`model`]: the resource model (hosts, jobs, requests, allocations);
//! - [`qos`], [`assoc`], [`partition`]: the site's policy objects (QOS with
//!   limits and flags, the account tree, partitions);
//! - [`usage`]: decayed usage for fair share and usage limits;
//! - [`catalog`]: name lookups over a snapshot's policy objects;
//! - [`fit`]: whether a request fits a host, and what the host lacks if not;
//! - [`priority`]: multifactor priority, fair share and the queue order;
//! - [`limits`]: QOS and association limits (one check for the pass and for
//!   the plan re-check in `apply`);
//! - [`deps`]: job dependencies (`afterok`, `afterany`, `afternotok`,
//!   `singleton`);
//! - [`idlefill`]: lending capacity quotas leave idle and reclaiming it
//!   (with the private `reclaim`); [`evict`]: running jobs a plan stops;
//! - [`pass`]: one scheduling pass over a [`Snapshot`], producing a [`Plan`];
//! - [`profile`]: a host's free resources over time, for backfill;
//! - [`HostLayout`]: which hosts are up and their classes, which a caller
//!   whose hosts do not change keeps between passes;
//! - [`reason`]: Slurm reason codes with their words;
//! - [`resv`]: admin reservations (windows on hosts, maintenance);
//! - [`multipath`]: reservations held on every alternative of a job;
//! - [`signal`]: signal names and `--signal=[B:]SIG[@SECONDS]`.
//!
//! The deterministic simulator behind `berth sim` is its own crate,
//! `berth-sim`, which drives this one.

pub mod array;
pub mod assoc;
pub mod catalog;
pub mod deps;
pub mod evict;
pub mod explain;
pub mod fit;
mod free_index;
mod fxhash;
pub mod gres;
pub mod idlefill;
mod layout;
pub mod limits;
pub mod model;
pub mod multipath;
pub mod partition;
pub mod pass;
mod pool;
pub mod preempt;
pub mod priority;
pub mod profile;
pub mod qos;
pub mod reason;
mod reclaim;
pub mod resv;
pub mod signal;
pub mod usage;

pub use assoc::{Account, UserRecord};
pub use evict::{EvictCause, Eviction};
pub use fit::{fits, Lack};
pub use idlefill::IdleFill;
pub use layout::HostLayout;
pub use model::{
    Allocation, EmulatorInventory, EvictMark, GangMember, Host, HostState, Inventory, Job, JobId,
    JobSpec, JobState, ResourceSet, Resources,
};
pub use partition::Partition;
pub use pass::{
    host_names, need_on, schedule, schedule_in, ArrayTask, GangPlacement, PendingJob, Placement,
    Plan, Policy, PriorityWeights, Reservation, RunningJob, Shape, Snapshot,
};
pub use qos::{Limits, Qos, QosFlags, TresKind, TresLimits};
pub use reason::{LimitKind, LimitScope, Reason};
pub use resv::AdminReservation;
pub use usage::{RunCharge, Usage};
