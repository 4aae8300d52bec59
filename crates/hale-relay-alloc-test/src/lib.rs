//! Empty: this package exists for its test, `tests/reject_path.rs`, which
//! installs a counting global allocator (see Cargo.toml for why it lives
//! apart from hale-relay).
