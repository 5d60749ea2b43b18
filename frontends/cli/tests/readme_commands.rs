//! The README's first steps hold on a fresh machine: the main command (`scripts/run.sh`)
//! installs the package that gives the tools the README uses next (`nbdinfo`, `nbdcopy`) and
//! builds the LD_PRELOAD shim, and every LD_PRELOAD line the README shows names the library by
//! a path the dynamic loader can open.

use std::path::Path;
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap()
}

/// The package names of a scripts/*-packages.txt list.
fn packages(rel: &str) -> Vec<String> {
    read(rel)
        .lines()
        .map(|l| l.split('#').next().unwrap().trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// The package lists `scripts/run.sh` installs.
fn run_sh_installs() -> Vec<String> {
    let run = read("scripts/run.sh");
    let line = run
        .lines()
        .find(|l| l.starts_with("install_packages"))
        .expect("run.sh installs packages");
    line.split_whitespace().skip(1).flat_map(packages).collect()
}

#[test]
fn the_main_command_installs_the_nbd_client_tools_the_readme_uses_next() {
    let readme = read("README.md");
    assert!(
        readme.contains("nbdinfo 'nbd+unix://"),
        "the README's next step"
    );
    let installed = run_sh_installs();
    // Which package gives each tool here, when dpkg knows (CI's Debian does).
    for tool in ["nbdinfo", "nbdcopy"] {
        let Ok(o) = Command::new("dpkg")
            .args(["-S", &format!("/usr/bin/{tool}")])
            .output()
        else {
            assert!(std::env::var_os("CI").is_none(), "dpkg is missing in CI");
            return;
        };
        if !o.status.success() {
            assert!(
                std::env::var_os("CI").is_none(),
                "{tool} is not installed in CI: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            continue;
        }
        let owner = String::from_utf8_lossy(&o.stdout);
        let pkg = owner.split(':').next().unwrap().trim().to_string();
        assert!(
            installed.contains(&pkg),
            "{tool} comes from {pkg}, which scripts/run.sh does not install ({installed:?})"
        );
    }
}

#[test]
fn the_shim_is_built_by_the_main_command_and_named_by_a_path() {
    let run = read("scripts/run.sh");
    assert!(
        run.lines()
            .any(|l| l.starts_with("cargo build") && l.contains("-p pmkit-preload")),
        "run.sh builds the shim"
    );
    for doc in ["README.md", "docs/usage.md"] {
        for (i, l) in read(doc).lines().enumerate() {
            for part in l.split_whitespace().filter(|w| w.contains("LD_PRELOAD=")) {
                let lib = part.split("LD_PRELOAD=").nth(1).unwrap().trim_matches('`');
                assert!(
                    lib.contains('/'),
                    "{doc} line {}: LD_PRELOAD={lib} does not load without a path",
                    i + 1
                );
            }
        }
    }
}
