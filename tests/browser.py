"""Headless Chromium for the report's browser test, driven through chromedriver with the W3C
WebDriver protocol (JSON over HTTP: the standard library is enough). Debian's ``chromium`` and
``chromium-driver`` are used where installed; a root session installs them (apt), as the SLURM
test installs SLURM; elsewhere the test is skipped, saying why."""
from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"   # the W3C key of an element reference
PACKAGES = ("chromium", "chromium-driver")
# as root, without a sandbox; no network service is reachable from CI machines
CHROMIUM_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync")


def browser_binaries() -> tuple[str, str] | str:
    """(chromium, chromedriver), installed with apt if this is root and they are missing; else why not."""
    found = shutil.which("chromium"), shutil.which("chromedriver")
    if all(found):
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "browser test: chromium and chromedriver are not installed (as root with apt, the test installs them)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES]
    try:
        if subprocess.run(install, env=env, capture_output=True, timeout=600).returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=600)
            proc = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                return f"browser test: apt could not install {' '.join(PACKAGES)}: {proc.stderr.strip()[-300:]}"
    except subprocess.TimeoutExpired:
        return f"browser test: installing {' '.join(PACKAGES)} took over 600 s"
    found = shutil.which("chromium"), shutil.which("chromedriver")
    return found if all(found) else "browser test: chromium or chromedriver missing after their install"


class Browser:
    """One WebDriver session."""

    def __init__(self, base: str, session: str):
        self.base, self.session = base, session

    def call(self, method: str, path: str, body: dict | None = None):
        request = urllib.request.Request(f"{self.base}/session/{self.session}{path}", method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return json.loads(response.read())["value"]
        except urllib.error.HTTPError as e:
            raise AssertionError(f"WebDriver {method} {path}: {e.read().decode(errors='replace')[:500]}") from None

    def open(self, url: str) -> None:
        self.call("POST", "/url", {"url": url})

    def script(self, js: str, *args):
        return self.call("POST", "/execute/sync", {"script": js, "args": list(args)})

    def find(self, xpath: str) -> list[str]:
        return [e[ELEMENT] for e in self.call("POST", "/elements", {"using": "xpath", "value": xpath})]

    def wait_for(self, xpath: str, timeout: float = 30) -> list[str]:
        deadline = time.monotonic() + timeout
        while not (found := self.find(xpath)):
            if time.monotonic() > deadline:
                raise AssertionError(f"nothing matches {xpath} after {timeout} s")
            time.sleep(0.1)
        return found

    def click(self, element: str) -> None:
        self.call("POST", f"/element/{element}/click", {})

    def enter_frame(self, element: str | None) -> None:
        """Into the frame ``element`` (None: back to the top page)."""
        self.call("POST", "/frame", {"id": None if element is None else {ELEMENT: element}})

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self.call("GET", "/screenshot")))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def chromium(binaries: tuple[str, str], width: int = 1600, height: int = 1000):
    """A headless Chromium session (its own chromedriver, its own empty profile)."""
    binary, driver = binaries
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([driver, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/status", timeout=2) as response:
                    if json.loads(response.read())["value"]["ready"]:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"chromedriver ({driver}) did not answer on port {port} within 30 s")
            time.sleep(0.1)
        with tempfile.TemporaryDirectory() as profile:
            options = {"binary": binary, "args": [*CHROMIUM_ARGS, f"--window-size={width},{height}",
                                                  f"--user-data-dir={profile}"]}
            body = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}}}
            request = urllib.request.Request(f"{base}/session", data=json.dumps(body).encode(), method="POST",
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=120) as response:
                browser = Browser(base, json.loads(response.read())["value"]["sessionId"])
            try:
                yield browser
            finally:
                browser.call("DELETE", "")
    finally:
        proc.terminate()
        proc.wait(30)
