//! Integration tests of hale-sim: one test binary, one module per subject.

mod scenarios;
