//! Integration tests of hale-sim (one binary).

mod membership;
