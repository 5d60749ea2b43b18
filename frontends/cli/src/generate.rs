//! `pmkit generate man DIR` and `pmkit generate completions SHELL`: the man pages (one per
//! command, `pmkit-fs-mount.1`, and `mount.fuse.pmkit.8`) and shell completions, made from the
//! same definitions that parse the command line, so they cannot drift from it. The package and
//! `scripts/install.sh` run them at install time.

use anyhow::{Context, Result};
use clap::{Args as ClapArgs, Command, CommandFactory, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(ClapArgs)]
pub(crate) struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand)]
enum What {
    /// Write a man page for every command (section 1) and the mount helper (section 8) into DIR.
    Man {
        /// The directory to write into (made if missing).
        dir: PathBuf,
    },
    /// Print the completion script for SHELL (bash, zsh, fish, elvish or powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// The exit statuses every command shares (each page lists them).
pub(crate) const EXIT_STATUS: &str = "Exit status:

0: success.

1: a check found problems, or what was asked for is busy (the command says which).

2: an error; what failed, where, and what to do are printed on stderr.

141: the reader of the output went away (SIGPIPE, as in `pmkit info DEV | head`); nothing is printed.";

pub(crate) fn run(a: Args, cli: Command) -> Result<ExitCode> {
    match a.what {
        What::Man { dir } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
            let n = man_pages(cli, &dir, "1")?
                + man_pages(crate::mount_helper::HelperArgs::command(), &dir, "8")?;
            eprintln!("wrote {n} man pages into {}", dir.display());
        }
        What::Completions { shell } => {
            let mut cli = cli;
            clap_complete::generate(shell, &mut cli, "pmkit", &mut std::io::stdout());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One page per command and subcommand (clap names them `pmkit-fs-mount`), hidden ones left out.
fn man_pages(cmd: Command, dir: &Path, section: &str) -> Result<usize> {
    fn each(cmd: Command, dir: &Path, section: &str, n: &mut usize) -> Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
            each(sub, dir, section, n)?;
        }
        let cmd = if cmd.get_after_long_help().is_some() {
            cmd
        } else {
            cmd.after_long_help(EXIT_STATUS)
        };
        let man = clap_mangen::Man::new(cmd)
            .section(section)
            .source(format!("pmkit {}", env!("CARGO_PKG_VERSION")))
            .manual("pmkit");
        let path = dir.join(man.get_filename());
        debug_assert!(path.extension().is_some_and(|e| e == section));
        let mut out =
            std::fs::File::create(&path).with_context(|| format!("{}", path.display()))?;
        man.render(&mut out)
            .with_context(|| format!("{}", path.display()))?;
        *n += 1;
        Ok(())
    }
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let mut n = 0;
    each(cmd, dir, section, &mut n)?;
    assert!(n > 0, "a command makes at least its own page");
    Ok(n)
}
