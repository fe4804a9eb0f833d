"""The web process a fault scenario stops and starts again, on a fixed port (Redis and
PostgreSQL restart likewise: tests/support/throwaway_servers.py). Nothing here needs
Django set up."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.servers import LISTENING_PATTERN, REPO_DIR, wait_for_log, web_command
from tests.support.throwaway_servers import free_port, stop_process


class WebProcess:
    """The web server on a fixed loopback port, so that a restart comes back at the same URL."""

    def __init__(self, env: dict[str, str], log_dir: Path):
        self.env = env
        self.log_dir = log_dir
        self.port = free_port()
        self.http_url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}/api/v1/ws"
        self.starts = 0
        self.process: subprocess.Popen | None = None

    def start(self) -> WebProcess:
        log = self.log_dir / f"web-{self.port}-{self.starts}.log"
        self.starts += 1
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                web_command(self.port), cwd=REPO_DIR, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
        wait_for_log(log, LISTENING_PATTERN, self.process)
        return self

    def stop(self) -> None:
        if self.process:
            stop_process(self.process)
