"""`agentbox serve` in a real headless chromium (Debian's, driven by Playwright): the dashboard of a
fixture run loads with the token, an answer typed in the browser reaches the run, a phone-sized
screen shows the narrow layout (its screenshot is saved), and without the token nothing loads."""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentbox.core.engine.run_store import RunStore
from tests.conftest import chromium_path
from tests.web.conftest import Served

pytestmark = [pytest.mark.browser, pytest.mark.slow]

_ESCAPES = re.compile(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][A-Za-z0-9]|\x1b.")


class Screen:
    """What the dashboard process sent the browser, as plain text (escape sequences removed)."""

    def __init__(self) -> None:
        self.raw = bytearray()

    def received(self, payload: Any) -> None:
        self.raw += payload if isinstance(payload, bytes) else str(payload).encode()

    def text(self) -> str:
        return _ESCAPES.sub("", self.raw.decode("utf-8", "replace"))


def wait_until(page: Any, condition: Callable[[], object], what: str, timeout: float = 60) -> None:
    """Poll `condition`, letting Playwright deliver its events meanwhile (a plain sleep would not)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        page.wait_for_timeout(200)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    assert executable is not None, "chromium is needed (apt-get install chromium)"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def open_dashboard(browser: Any, served: Served, **context: Any) -> tuple[Any, Screen]:
    page = browser.new_context(**context).new_page()
    screen = Screen()
    page.on("websocket", lambda ws: ws.on("framereceived", screen.received))
    page.goto(f"{served.base}/?token={served.token}")
    return page, screen


def test_the_dashboard_loads_and_an_answer_reaches_the_run(browser: Any, served: Served) -> None:
    page, screen = open_dashboard(browser, served, viewport={"width": 1400, "height": 900})
    assert "token" not in page.url, "the token left the address bar"
    wait_until(page, lambda: all(word in screen.text() for word in ("members", "queue", "artifacts", "cp-1")),
               "the members, the queue, the artifacts and the open checkpoint")
    text = screen.text()
    assert "builder" in text and "docs" in text and "greet.py" in text
    run_id = RunStore(served.project).list_ids()[0]
    assert RunStore(served.project).load(run_id).checkpoints["cp-1"].answer is None
    page.locator("body").click()
    page.keyboard.press("a")
    wait_until(page, lambda: "your answer" in screen.text()[len(text):], "the answer dialog")
    page.wait_for_timeout(300)
    page.keyboard.type("English")
    wait_until(page, lambda: "English" in screen.text()[len(text):].split("your answer")[-1], "the typed answer")
    page.keyboard.press("Enter")
    wait_until(page, lambda: RunStore(served.project).load(run_id).checkpoints["cp-1"].answer is not None,
               "the answer to reach the run")
    assert RunStore(served.project).load(run_id).checkpoints["cp-1"].answer == "English"


def test_a_phone_sized_screen_is_usable(browser: Any, served: Served, tmp_path: Path) -> None:
    page, screen = open_dashboard(browser, served, viewport={"width": 390, "height": 844}, is_mobile=True,
                                  has_touch=True, device_scale_factor=1)
    wait_until(page, lambda: all(word in screen.text() for word in ("members", "queue", "cp-1")), "the narrow dashboard")
    page.touchscreen.tap(195, 700)  # a first touch (on the event log) gives the page focus; the footer shows its keys
    wait_until(page, lambda: "palette" in screen.text(), "the footer's keys, the command palette among them")
    page.wait_for_timeout(1000)  # let the last frame paint before the picture
    shot = tmp_path / "dashboard-phone.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000, "a real picture of the dashboard"
    keep = os.environ.get("AGENTBOX_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / shot.name)
    before = len(screen.raw)
    page.touchscreen.tap(*_footer_key(page, "palette"))
    wait_until(page, lambda: "Search for commands" in screen.text()[before:] or "Search" in screen.text()[before:],
               "the command palette, opened by a tap")


def _footer_key(page: Any, label: str) -> tuple[float, float]:
    """Where on the page the footer's key with `label` is (the terminal's last row, by its text)."""
    box = page.locator(".textual-terminal").bounding_box()
    assert box is not None
    return box["x"] + box["width"] - 30, box["y"] + box["height"] - 8


def test_without_the_token_nothing_loads(browser: Any, served: Served) -> None:
    page = browser.new_context().new_page()
    sockets: list[Any] = []
    page.on("websocket", lambda ws: sockets.append(ws))
    response = page.goto(served.base + "/")
    assert response is not None and response.status == 401
    assert "needs the token" in page.content()
    wrong = page.goto(f"{served.base}/?token=not-the-token")
    assert wrong is not None and wrong.status == 401
    assert sockets == [], "no dashboard was started"
