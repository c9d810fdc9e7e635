//! The read and policy calls of sinfo, scontrol and sacctmgr, through the
//! same failover as every other call. Policy upserts and deletes are safe
//! to send again after UNAVAILABLE: each sets a whole object by name.

use crate::cluster::Cluster;
use crate::error::ClientError;
use berth_proto::api::{
    Account, AdminResponse, DeletePolicyRequest, DeleteReservationRequest, Host,
    ListAccountsRequest, ListHostsRequest, ListPartitionsRequest, ListQosRequest,
    ListReservationsRequest, ListUsersRequest, Partition, Qos, Reservation, User,
};

impl Cluster {
    pub async fn list_hosts(&mut self) -> Result<Vec<Host>, ClientError> {
        self.call(|mut c| async move { c.list_hosts(ListHostsRequest {}).await })
            .await
            .map(|r| r.hosts)
    }

    pub async fn list_partitions(&mut self) -> Result<Vec<Partition>, ClientError> {
        self.call(|mut c| async move { c.list_partitions(ListPartitionsRequest {}).await })
            .await
            .map(|r| r.partitions)
    }

    pub async fn list_reservations(&mut self) -> Result<Vec<Reservation>, ClientError> {
        self.call(|mut c| async move { c.list_reservations(ListReservationsRequest {}).await })
            .await
            .map(|r| r.reservations)
    }

    pub async fn list_qos(&mut self) -> Result<Vec<Qos>, ClientError> {
        self.call(|mut c| async move { c.list_qos(ListQosRequest {}).await })
            .await
            .map(|r| r.qos)
    }

    pub async fn list_accounts(&mut self) -> Result<Vec<Account>, ClientError> {
        self.call(|mut c| async move { c.list_accounts(ListAccountsRequest {}).await })
            .await
            .map(|r| r.accounts)
    }

    pub async fn list_users(&mut self) -> Result<Vec<User>, ClientError> {
        self.call(|mut c| async move { c.list_users(ListUsersRequest {}).await })
            .await
            .map(|r| r.users)
    }

    pub async fn upsert_qos(&mut self, qos: Qos) -> Result<AdminResponse, ClientError> {
        self.call(|mut c| {
            let qos = qos.clone();
            async move { c.upsert_qos(qos).await }
        })
        .await
    }

    pub async fn upsert_account(&mut self, account: Account) -> Result<AdminResponse, ClientError> {
        self.call(|mut c| {
            let account = account.clone();
            async move { c.upsert_account(account).await }
        })
        .await
    }

    pub async fn upsert_user(&mut self, user: User) -> Result<AdminResponse, ClientError> {
        self.call(|mut c| {
            let user = user.clone();
            async move { c.upsert_user(user).await }
        })
        .await
    }

    pub async fn delete_qos(&mut self, name: String) -> Result<AdminResponse, ClientError> {
        self.call(|mut c| {
            let name = name.clone();
            async move { c.delete_qos(DeletePolicyRequest { name }).await }
        })
        .await
    }

    pub async fn delete_account(&mut self, name: String) -> Result<AdminResponse, ClientError> {
        self.call(|mut c| {
            let name = name.clone();
            async move { c.delete_account(DeletePolicyRequest { name }).await }
        })
        .await
    }

    pub async fn create_reservation(
        &mut self,
        reservation: Reservation,
    ) -> Result<AdminResponse, ClientError> {
        self.call(|mut c| {
            let reservation = reservation.clone();
            async move { c.create_reservation(reservation).await }
        })
        .await
    }

    pub async fn delete_reservation(&mut self, name: String) -> Result<AdminResponse, ClientError> {
        self.call(|mut c| {
            let name = name.clone();
            async move {
                c.delete_reservation(DeleteReservationRequest { name })
                    .await
            }
        })
        .await
    }
}
