"""Servers a fault scenario stops and starts again, so each keeps a fixed port:
the web process, Redis and PostgreSQL. Nothing here needs Django set up."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.servers import REPO_DIR, free_port, stop_process, wait_for_log


class WebProcess:
    """daphne on a fixed loopback port, so that a restart comes back at the same URL."""

    def __init__(self, env: dict[str, str], log_dir: Path):
        self.env = env
        self.log_dir = log_dir
        self.port = free_port()
        self.http_url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}/api/v1/ws"
        self.starts = 0
        self.process: subprocess.Popen | None = None

    def start(self) -> WebProcess:
        log = self.log_dir / f"daphne-{self.port}-{self.starts}.log"
        self.starts += 1
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port),
                 "tarsy_scoring.asgi:application"],
                cwd=REPO_DIR, env=self.env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        wait_for_log(log, r"Listening on TCP address", self.process)
        return self

    def stop(self) -> None:
        if self.process:
            stop_process(self.process)


class RedisProcess:
    """A throwaway redis-server on a fixed port, stoppable and restartable."""

    def __init__(self, log_dir: Path):
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise RuntimeError("redis-server is not on PATH (apt-get install redis-server)")
        self.log_dir = log_dir
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.starts = 0
        self.process: subprocess.Popen | None = None

    def start(self) -> RedisProcess:
        log = self.log_dir / f"redis-{self.port}-{self.starts}.log"
        self.starts += 1
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        wait_for_log(log, r"Ready to accept connections", self.process)
        return self

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


class PostgresProcess:
    """A throwaway PostgreSQL cluster (initdb + pg_ctl), run as ``postgres`` when we are root."""

    def __init__(self, root: Path):
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl")) or [shutil.which("pg_ctl") or ""]
        if not found[-1]:
            raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) not found; apt-get install postgresql")
        self.bin = Path(found[-1]).parent
        self.root = Path(tempfile.mkdtemp(prefix="faults-pg-")) if os.geteuid() == 0 else root
        self.data = self.root / "data"
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/tarsy_scoring"
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")

    def _run(self, *args: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run(prefix + list(args), check=True, capture_output=True)

    def create(self) -> PostgresProcess:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
                  "--locale=C", "--no-sync")  # fmt: skip
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"listen_addresses = '127.0.0.1'\nport = {self.port}\nunix_socket_directories = ''\n"
                "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
            )
        self.start()
        subprocess.run([str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                        "tarsy_scoring"], check=True)  # fmt: skip
        return self

    def start(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.data / "server.log"), "-w",
                  "-t", "60", "start")  # fmt: skip

    def stop(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "stop", "-m", "fast")

    def remove(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
