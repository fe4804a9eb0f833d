# Shell helpers shared by bin/run, bin/test and .ci/run. Source it; it defines
# functions only, and sets REPO_ROOT, VENV and VAR_DIR.

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO_ROOT/.venv"
# The folder the settings keep the secret key in (TARSY_SCORING_VAR_DIR, default var/).
VAR_DIR="${TARSY_SCORING_VAR_DIR:-$REPO_ROOT/var}"

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

is_root() { [ "$(id -u)" -eq 0 ]; }

apt_updated=""
# Installs Debian packages, when we may (root with apt-get); otherwise says what
# to install and stops.
apt_install() {
    if ! is_root || ! command -v apt-get >/dev/null; then
        die "missing $*: install it (Debian/Ubuntu: sudo apt-get install $*) and run this again"
    fi
    say "installing $* with apt-get"
    if [ -z "$apt_updated" ]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

find_python311() {
    if command -v python3.11 >/dev/null; then
        command -v python3.11
    elif command -v pyenv >/dev/null && pyenv which python3.11 >/dev/null 2>&1; then
        pyenv which python3.11
    else
        return 1
    fi
}

# Creates .venv with Python 3.11 when it is missing (or another Python), then
# installs the given lock file unless this exact file was installed already.
ensure_venv() {
    local lock_file="$REPO_ROOT/$1"
    if ! "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
        local python
        if ! python="$(find_python311)"; then
            apt_install python3.11 python3.11-venv
            python="$(find_python311)" || die "python3.11 not found after installing it"
        fi
        say "creating .venv with $python"
        rm -rf "$VENV"
        "$python" -m venv "$VENV" || die "could not create .venv (Debian: apt-get install python3.11-venv)"
    fi
    # Every pin of base.txt is in dev.txt at the same version (tests/test_locks.py): a
    # .venv installed from the current dev.txt has all that base.txt asks for.
    if [ "$1" = requirements/base.txt ] && installed requirements/dev.txt; then
        return 0
    fi
    if ! installed "$1"; then
        say "installing $1 into .venv"
        "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$lock_file" || die "pip install -r $1 failed"
        sha256sum "$lock_file" | cut -d' ' -f1 >"$VENV/.installed-$(basename "$1").sha256"
    fi
}

# Whether .venv holds this lock file as it is now: its stamp records the content it
# installed, so a changed lock installs again.
installed() {
    [ "$(cat "$VENV/.installed-$(basename "$1").sha256" 2>/dev/null)" = "$(sha256sum "$REPO_ROOT/$1" | cut -d' ' -f1)" ]
}

# Installs the PostgreSQL and Redis servers when missing, and as root the postgres
# system user that runs PostgreSQL (tests/support/throwaway_servers.py starts them).
ensure_server_binaries() {
    command -v redis-server >/dev/null || apt_install redis-server
    if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
        apt_install postgresql
    fi
    if is_root && ! id -u postgres >/dev/null 2>&1; then
        useradd --system --home-dir /nonexistent --shell /usr/sbin/nologin postgres
    fi
}

free_port() {
    "$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits until something accepts TCP connections on 127.0.0.1:$1, for at most
# $2 seconds, as long as process $3 is alive.
wait_for_port() {
    local port="$1" timeout_s="$2" pid="$3" waited=0
    until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
        kill -0 "$pid" 2>/dev/null || return 1
        [ "$waited" -lt $((timeout_s * 10)) ] || return 1
        sleep 0.1
        waited=$((waited + 1))
    done
}
