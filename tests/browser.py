"""Headless Chromium driven over the DevTools protocol, for the HTML report's tests.

Real input events (Input.dispatchMouseEvent: presses, moves, releases at page coordinates), the
page's own state read back with Runtime.evaluate, and screenshots (Page.captureScreenshot). The
browser runs offline (--disable-background-networking, a fresh profile) and every network
request the page makes is recorded, so a test can prove the report fetches nothing.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("PROFILER_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless Chromium with one page; use as a context manager."""

    def __init__(self, width: int = 1300, height: int = 900) -> None:
        import websocket

        if CHROMIUM is None:
            raise RuntimeError("chromium is not installed")
        self.profile = tempfile.mkdtemp(prefix="profiler-chromium-")
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--no-first-run", "--no-default-browser-check", f"--user-data-dir={self.profile}",
             f"--window-size={width},{height}", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url = self._devtools_url()
        host_port = url.split("/")[2]
        page = self._page_url(host_port)
        self.ws = websocket.create_connection(page, timeout=30, suppress_origin=True)
        self._id = 0
        self.events: list[dict[str, Any]] = []
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.call("Network.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def _devtools_url(self) -> str:
        assert self.proc.stderr is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                return m.group(1)
        self.close()
        raise RuntimeError("chromium did not start its DevTools endpoint")

    @staticmethod
    def _page_url(host_port: str) -> str:
        import urllib.request

        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://{host_port}/json/list", timeout=5) as r:  # noqa: S310 - local DevTools
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            if pages:
                return str(pages[0]["webSocketDebuggerUrl"])
            time.sleep(0.1)
        raise RuntimeError("chromium has no page")

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            if getattr(self, "ws", None) is not None:
                self.ws.close()
        finally:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
            if self.proc.stderr is not None:
                self.proc.stderr.close()
            shutil.rmtree(self.profile, ignore_errors=True)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        mid = self._id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                result: dict[str, Any] = msg.get("result", {})
                return result
            self.events.append(msg)

    def open(self, path: Path) -> None:
        self.events.clear()
        self.call("Page.navigate", url=path.resolve().as_uri())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.js("document.readyState") == "complete":
                return
            time.sleep(0.05)
        raise RuntimeError("the page did not finish loading")

    def js(self, expr: str) -> Any:
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"page script failed: {r['exceptionDetails']}")
        return r.get("result", {}).get("value")

    def errors(self) -> list[str]:
        """Uncaught exceptions and console errors the page produced so far."""
        out = []
        for e in self.events:
            if e.get("method") == "Runtime.exceptionThrown":
                out.append(str(e["params"]["exceptionDetails"].get("exception", {}).get("description")))
            elif e.get("method") == "Runtime.consoleAPICalled" and e["params"].get("type") == "error":
                out.append(" ".join(str(a.get("value")) for a in e["params"].get("args", [])))
        return out

    def requests(self) -> list[str]:
        """Every URL the page asked the network for."""
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    def center(self, selector: str, scroll: bool = True) -> tuple[float, float]:
        """The middle of the first element matching ``selector`` in viewport pixels (scrolled into
        view first unless ``scroll`` is False)."""
        x, y, w, h = self.box(selector, scroll)
        return x + w / 2, y + h / 2

    def box(self, selector: str, scroll: bool = True) -> tuple[float, float, float, float]:
        """(left, top, width, height) of the first element matching ``selector``, viewport pixels."""
        into = "e.scrollIntoView({block: 'center'});" if scroll else ""
        b = self.js(f"""(() => {{ const e = document.querySelector({json.dumps(selector)});
            if (!e) return null; {into} const r = e.getBoundingClientRect();
            return [r.left, r.top, r.width, r.height]; }})()""")
        if b is None:
            raise LookupError(f"no element matches {selector}")
        return b[0], b[1], b[2], b[3]

    def mouse(self, kind: str, x: float, y: float, buttons: int = 0) -> None:
        self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left" if kind != "mouseMoved" or buttons else "none",
                  buttons=buttons, clickCount=1 if kind != "mouseMoved" else 0)

    def click(self, x: float, y: float) -> None:
        self.mouse("mouseMoved", x, y)
        self.mouse("mousePressed", x, y, 1)
        self.mouse("mouseReleased", x, y, 0)

    def drag(self, x0: float, y0: float, x1: float, y1: float, steps: int = 8) -> None:
        self.mouse("mouseMoved", x0, y0)
        self.mouse("mousePressed", x0, y0, 1)
        for i in range(1, steps + 1):
            self.mouse("mouseMoved", x0 + (x1 - x0) * i / steps, y0 + (y1 - y0) * i / steps, 1)
        self.mouse("mouseReleased", x1, y1, 0)

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            w, hgt = self.js("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params["clip"] = {"x": 0, "y": 0, "width": w, "height": hgt, "scale": 1}
            params["captureBeyondViewport"] = True
        data = self.call("Page.captureScreenshot", **params)["data"]
        path.write_bytes(base64.b64decode(data))
        return path
