# Shared helpers for pmkit's scripts. Sourced, not run.

# Install Debian packages listed in the files given (one name per line, '#' comments), skipping
# the apt round-trip when all are present, so the scripts stay idempotent and fast on re-runs.
install_packages() {
    local want=() missing=() p
    for f in "$@"; do
        [ -f "$f" ] || continue
        while read -r p; do
            p="${p%%#*}"; p="${p//[[:space:]]/}"
            [ -n "$p" ] && want+=("$p")
        done <"$f"
    done
    for p in "${want[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "pmkit: installing Debian packages: ${missing[*]}" >&2
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

require_cargo() {
    if ! command -v cargo >/dev/null 2>&1; then
        [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
    fi
    command -v cargo >/dev/null 2>&1 || {
        echo "pmkit: cargo not found. Install Rust (https://rustup.rs, stable >= 1.89) and re-run." >&2
        exit 1
    }
}
