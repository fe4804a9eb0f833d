"""Throwaway PostgreSQL and Redis servers on loopback: the one place that starts, waits
for and stops them, for the tests, the benchmarks, ``bin/topology`` and ``bin/test``.

Each server listens on a free port of 127.0.0.1 only (PostgreSQL without a Unix
socket), keeps its data and log in a folder of its own, and keeps its port across
``stop()`` and ``start()``, so that a fault scenario can restart it under its clients.
PostgreSQL runs as the ``postgres`` system user when we are root (initdb refuses root);
Redis runs in a session of its own, as pg_ctl detaches PostgreSQL, so that a Ctrl-C in
the terminal reaches only the caller, which stops them after what uses them.

    with Postgres(folder / "pg", max_connections=300) as postgres, Redis(folder / "redis") as redis:
        ...postgres.url, redis.url...

``bin/test`` keeps both across its two pytest runs, so it uses the command line, after
installing the server binaries (``ensure_server_binaries`` in ``bin/lib.sh``):

    python -m tests.support.throwaway_servers start postgres FOLDER   # prints its URL
    python -m tests.support.throwaway_servers start redis FOLDER
    python -m tests.support.throwaway_servers remove FOLDER...        # stops, deletes

Nothing here needs Django.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 10
DATABASE = "tarsy_scoring"
# The scale-out topology on one machine (bin/topology, the benchmarks): every web and
# worker process keeps a pool of connections (docs/deploy.md budgets them).
SCALE_OUT_MAX_CONNECTIONS = 300
# Where a root-run PostgreSQL's folder points when the postgres user cannot reach it.
ELSEWHERE = "elsewhere"
REDIS_PID_FILE = "redis.pid"


class ServerError(RuntimeError):
    """A throwaway server could not be started."""


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on now (the system picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def stop_process(process: subprocess.Popen, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM a child process; SIGKILL it if it has not exited within ``timeout_s``."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _wait_until(ready, what: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            outcome = f"exited ({process.returncode})" if process.poll() is not None else "is not ready"
            raise ServerError(f"{what} {outcome} within {START_TIMEOUT_S} s; its log:\n{_read(log)}")
        time.sleep(0.05)


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


# --- PostgreSQL ----------------------------------------------------------------------------------


def _as_root() -> bool:
    return os.geteuid() == 0


def postgres_bin_dir() -> Path:
    """Where initdb and pg_ctl are: on PATH, else Debian's newest /usr/lib/postgresql/<version>/bin."""
    if shutil.which("pg_ctl") and shutil.which("initdb"):
        return Path(shutil.which("pg_ctl")).resolve().parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda path: int(path.split("/")[4]))
    if not found:
        raise ServerError("PostgreSQL server binaries (initdb, pg_ctl) not found; apt-get install postgresql")
    return Path(found[-1]).parent


def _run_as_owner(
    command: list[str], check: bool = True, log: Path | None = None
) -> subprocess.CompletedProcess:
    """Run a PostgreSQL program as the cluster's owner: the postgres user when we are root."""
    prefix = ["runuser", "-u", "postgres", "--"] if _as_root() else []
    done = subprocess.run([*prefix, *command], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        server_log = _read(log) if log else ""
        raise ServerError(
            f"{Path(command[0]).name} failed ({done.returncode}):\n{done.stdout}{done.stderr}{server_log}"
        )
    return done


def _postgres_root(folder: Path) -> Path:
    elsewhere = folder / ELSEWHERE
    return elsewhere.resolve() if elsewhere.is_symlink() else folder


class Postgres:
    """A throwaway cluster with one database, ``tarsy_scoring``, that user ``postgres``
    reaches without a password.

    ``durable=False`` turns fsync, synchronous_commit and full_page_writes off (the
    data is thrown away; the tests run faster); bin/topology and the benchmarks keep
    PostgreSQL's defaults, as production runs. ``max_connections``: PostgreSQL's
    default (100) unless given.
    """

    def __init__(self, folder: Path, *, max_connections: int | None = None, durable: bool = False):
        self.folder = folder
        self.max_connections = max_connections
        self.durable = durable
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/{DATABASE}"
        self.bin = postgres_bin_dir()

    @property
    def data(self) -> Path:
        return _postgres_root(self.folder) / "data"

    @property
    def log(self) -> Path:
        """The server's log, in a folder the server's user can write."""
        return _postgres_root(self.folder) / "server.log"

    @property
    def pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def _make_folder(self) -> None:
        """The folder, owned by the postgres user when we are root; if that user cannot
        reach it (a parent is closed to other users, as /root is), the data goes to a
        temporary folder that ``folder/elsewhere`` points to."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if not _as_root():
            return
        shutil.chown(self.folder, "postgres")
        if _run_as_owner(["test", "-w", str(self.folder)], check=False).returncode != 0:
            elsewhere = Path(tempfile.mkdtemp(prefix="throwaway-postgres-"))
            shutil.chown(elsewhere, "postgres")
            (self.folder / ELSEWHERE).symlink_to(elsewhere)

    def create(self) -> Postgres:
        """initdb, start, and create the database."""
        self._make_folder()
        self._program("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
                      "--locale=C", "--no-sync")  # fmt: skip
        conf = ["listen_addresses = '127.0.0.1'", f"port = {self.port}", "unix_socket_directories = ''"]
        if self.max_connections:
            conf.append(f"max_connections = {self.max_connections}")
        if not self.durable:
            conf += ["fsync = off", "synchronous_commit = off", "full_page_writes = off"]
        with (self.data / "postgresql.conf").open("a") as file:
            file.write("\n".join(conf) + "\n")
        self.start()
        self._program("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", DATABASE)
        return self

    def start(self) -> None:
        self._program("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", str(START_TIMEOUT_S),
                      "start")  # fmt: skip

    def stop(self) -> None:
        self._program("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self, keep_log: Path | None = None) -> None:
        """Stop the server if it runs and delete its folder; ``keep_log``: copy its log there first."""
        if keep_log and self.log.exists():
            shutil.copyfile(self.log, keep_log)
        remove_folder(self.folder)

    def _program(self, name: str, *args: str) -> None:
        _run_as_owner([str(self.bin / name), *args], log=self.log)

    def __enter__(self) -> Postgres:
        try:
            return self.create()
        except BaseException:
            self.remove()
            raise

    def __exit__(self, *exc_info) -> None:
        self.remove()


# --- Redis ---------------------------------------------------------------------------------------


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class Redis:
    """A throwaway redis-server: no persistence, its folder as working directory (so no
    stray dump.rdb is loaded), its log and pid file there."""

    def __init__(self, folder: Path):
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise ServerError("redis-server is not on PATH (apt-get install redis-server)")
        self.folder = folder
        self.log = folder / "redis.log"
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> Redis:
        """Start it and wait until it answers PING; a restart appends to the same log."""
        self.folder.mkdir(parents=True, exist_ok=True)
        command = [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                   "--appendonly", "no", "--dir", str(self.folder),
                   "--pidfile", str(self.folder / REDIS_PID_FILE)]  # fmt: skip
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            _wait_until(lambda: _answers_ping(self.port), "redis-server", self.process, self.log)
        except ServerError:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)

    def remove(self, keep_log: Path | None = None) -> None:
        """Stop it and delete its folder; ``keep_log``: copy its log there first."""
        self.stop()
        if keep_log and self.log.exists():
            shutil.copyfile(self.log, keep_log)
        remove_folder(self.folder)

    def __enter__(self) -> Redis:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.remove()


def _stop_redis_of(folder: Path) -> None:
    """Stop the redis-server whose pid file is in ``folder`` (started by another process)."""
    try:
        pid = int((folder / REDIS_PID_FILE).read_text())
    except (OSError, ValueError):
        return
    if _read(Path(f"/proc/{pid}/comm")).strip() != "redis-server":
        return  # gone, and its pid reused
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if Path(f"/proc/{pid}").exists():
        os.kill(pid, signal.SIGKILL)


# --- Either --------------------------------------------------------------------------------------


def remove_folder(folder: Path) -> None:
    """Stop the server that runs from ``folder``, whichever process started it (a
    killed run's too), and delete the folder."""
    _stop_redis_of(folder)
    root = _postgres_root(folder)
    if (root / "data" / "postmaster.pid").exists():
        pg_ctl = str(postgres_bin_dir() / "pg_ctl")
        _run_as_owner([pg_ctl, "-D", str(root / "data"), "-m", "fast", "-w", "stop"], check=False)
    if root != folder:
        shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)


def _version(program: Path) -> str:
    """``postgres (PostgreSQL) 15.14`` or ``Redis server v=7.0.15``: the start of ``--version``."""
    return " ".join(subprocess.run([program, "--version"], capture_output=True, text=True).stdout.split()[:3])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.throwaway_servers", description=__doc__.split("\n\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start", help="start a server that outlives this command; print its URL")
    start.add_argument("server", choices=["postgres", "redis"])
    start.add_argument("folder", type=Path)
    remove = commands.add_parser("remove", help="stop the servers of these folders and delete them")
    remove.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args(argv)
    if args.command == "remove":
        for folder in args.folders:
            remove_folder(folder.resolve())
        return 0
    folder = args.folder.resolve()
    try:
        if args.server == "postgres":
            server = Postgres(folder)
            version = _version(server.bin / "postgres")
            print(f"==> starting a throwaway {version} on 127.0.0.1:{server.port}", file=sys.stderr)
            server.create()
        else:
            server = Redis(folder)
            version = _version(Path(server.binary))
            print(f"==> starting a throwaway {version} on 127.0.0.1:{server.port}", file=sys.stderr)
            server.start()
    except ServerError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(server.url)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
