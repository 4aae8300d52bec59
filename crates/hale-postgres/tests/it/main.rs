//! hale-postgres against real PostgreSQL 15 (`/usr/lib/postgresql/15/bin`),
//! as root, with clusters owned by the `postgres` user in temporary
//! directories. A missing PostgreSQL fails the tests, saying what to install.

#![allow(clippy::unwrap_used)]

mod fence;
mod fixture;
mod rejoin;
mod standing;
mod synchronous;
