//! `pmkit probe` (being written).
#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    json: bool,
}
pub fn run(_a: Args) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("probe is being written")
}
