//! `hale completions SHELL` and `hale man`: shell completions and the man
//! page, generated from the CLI's own definition (the Debian package ships
//! both: `dist/gen-assets.sh`).

use std::io::Write;

use clap::Args;
use clap_complete::Shell;

/// `hale completions SHELL`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    pub shell: Shell,
}

/// Writes `shell`'s completions for `cmd` to standard output.
pub fn completions(mut cmd: clap::Command, shell: Shell) -> anyhow::Result<()> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "hale", &mut out);
    print(&out)
}

/// Writes the man page (roff) for `cmd` to standard output.
pub fn man(cmd: clap::Command) -> anyhow::Result<()> {
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut out)?;
    print(&out)
}

/// Standard output closed early (`hale man | head`) is not an error.
fn print(out: &[u8]) -> anyhow::Result<()> {
    match std::io::stdout().write_all(out) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
