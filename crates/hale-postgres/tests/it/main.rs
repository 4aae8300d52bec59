//! hale-postgres against real PostgreSQL 15 (`/usr/lib/postgresql/15/bin`),
//! as root, with clusters owned by the `postgres` user in temporary
//! directories. A missing PostgreSQL fails the tests, saying what to install.
//! `debian` drives clusters of Debian's own package (`pg_createcluster`).

#![allow(clippy::unwrap_used)]

mod check;
mod debian;
mod disk;
mod fence;
mod fixture;
mod rejoin;
mod secrets;
mod standing;
mod synchronous;
mod tls;
