//! `ragtune completions bash|zsh|fish`: the shell completion script of the whole command line, on stdout.

use std::io::Write;

use clap_complete::Shell;

/// The shells `ragtune completions` writes a script for.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh or fish.
    #[arg(value_enum)]
    pub shell: CompletionShell,
}

/// Writes the completion script of `command` for the chosen shell to stdout.
///
/// # Errors
///
/// When stdout cannot be written.
pub fn run(mut command: clap::Command, args: &CompletionsArgs) -> anyhow::Result<()> {
    let shell = match args.shell {
        CompletionShell::Bash => Shell::Bash,
        CompletionShell::Zsh => Shell::Zsh,
        CompletionShell::Fish => Shell::Fish,
    };
    let name = command.get_name().to_string();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, name, &mut out);
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&out)?;
    stdout.flush()?;
    Ok(())
}
