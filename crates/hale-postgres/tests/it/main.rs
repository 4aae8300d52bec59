//! Integration tests against real PostgreSQL 15.
