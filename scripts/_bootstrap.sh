# Sourced by scripts/quickstart and scripts/test: find Python 3.11+, create .venv, install.
# Installs again only when pyproject.toml changed (a stamp file remembers its hash).

die() { echo "kraftlite: $*" >&2; exit 1; }

find_python() {
    for candidate in "${PYTHON:-}" python3.11 python3.12 python3.13 python3; do
        [ -n "$candidate" ] || continue
        command -v "$candidate" >/dev/null 2>&1 || continue
        if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

# editable_mode=compat: the checkout itself goes on sys.path (a .pth), so Spark's workers find
# the top-level pyspark_kraftlite module by scanning sys.path, as they do for a normal install.
ensure_venv() {  # ensure_venv EXTRAS  (e.g. "dev,spark" or "" for the runtime only)
    local extras="$1" python stamp wanted
    if [ ! -x .venv/bin/python ]; then
        python="$(find_python)" || die "Python 3.11 or newer is required (set PYTHON=/path/to/python3.11)"
        "$python" -m venv --help >/dev/null 2>&1 || die "$python has no venv module (Debian: apt-get install python3-venv)"
        echo "kraftlite: creating .venv with $("$python" --version)" >&2
        "$python" -m venv .venv
    fi
    stamp=.venv/.kraftlite-installed
    wanted="$(sha256sum pyproject.toml | cut -d' ' -f1) [${extras}]"
    if [ ! -f "$stamp" ] || ! grep -qxF "$wanted" "$stamp"; then
        echo "kraftlite: installing kraftlite${extras:+[$extras]} into .venv" >&2
        local log=.venv/pip-install.log
        if ! { .venv/bin/python -m pip install --disable-pip-version-check --upgrade pip &&
               .venv/bin/python -m pip install --disable-pip-version-check \
                   --config-settings editable_mode=compat -e ".${extras:+[$extras]}"; } \
               >"$log" 2>&1; then
            tail -n 30 "$log" >&2
            die "installing into .venv failed (full log: $log)"
        fi
        echo "$wanted" >> "$stamp"
    fi
}

require_java() {  # Spark (the spark extra) runs on a JVM: Java 17 or newer
    command -v java >/dev/null 2>&1 || die "Java 17 or newer is required for the Spark tests (Debian: apt-get install openjdk-17-jre-headless)"
}

# apt_install NAME [APT ARGS...]: a system package for the tests, when the machine has apt
# and may install (root or passwordless sudo); the tests that need it say so and skip where
# it cannot be had.
apt_install() {
    local name="$1" sudo=""
    shift
    command -v apt-get >/dev/null 2>&1 || return 0
    if [ "$(id -u)" -ne 0 ]; then
        sudo -n true 2>/dev/null || return 0
        sudo="sudo -n"
    fi
    echo "kraftlite: installing $name (apt-get)" >&2
    { $sudo apt-get install -y -q "$@" || { $sudo apt-get update -q && $sudo apt-get install -y -q "$@"; }; } \
        >".venv/apt-$name.log" 2>&1 || echo "kraftlite: $name not installed (see .venv/apt-$name.log)" >&2
}

# kcat (librdkafka's command-line client) for the Kafka protocol tests.
ensure_kcat() {
    command -v kcat >/dev/null 2>&1 || apt_install kcat kcat
}

# iproute2 and nftables for the test hosts (tests/harness/hosts.py: network namespaces, the
# hub's link faults); the network tests skip with a reason where they cannot be had.
ensure_netns_tools() {
    command -v ip >/dev/null 2>&1 || apt_install iproute2 iproute2
    command -v nft >/dev/null 2>&1 || apt_install nftables nftables
}

# Chromium for the console's browser tests (tests/browser, Playwright driving the system's
# browser: no browser download).
ensure_chromium() {
    [ -x /usr/bin/chromium ] || apt_install chromium --no-install-recommends chromium
}

# promtool (Prometheus's rule checker) for tests/unit/test_alert_rules.py: only its binary, out
# of Debian's prometheus package into .venv/bin (installing the package would start a
# Prometheus server); the test skips with a reason where it cannot be had.
ensure_promtool() {
    [ -x .venv/bin/promtool ] && return 0
    command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 || return 0
    local dir
    dir="$(mktemp -d)"
    echo "kraftlite: fetching promtool (apt-get download prometheus)" >&2
    if ( cd "$dir" && { apt-get download -q prometheus ||
            { [ "$(id -u)" -eq 0 ] && apt-get update -q && apt-get download -q prometheus; }; } &&
            dpkg-deb -x prometheus_*.deb unpacked ) >.venv/apt-promtool.log 2>&1; then
        cp "$dir/unpacked/usr/bin/promtool" .venv/bin/promtool
    else
        echo "kraftlite: promtool not fetched (see .venv/apt-promtool.log)" >&2
    fi
    rm -rf "$dir"
}
