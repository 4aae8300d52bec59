//! The `hale` command-line tool.

fn main() {}
