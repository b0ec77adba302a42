"""The docs site as a reader meets it: built strict, served on loopback, and its home page, quickstart and API
reference opened in Debian's headless Chromium. What the browser rendered (its DOM after the scripts ran)
must hold what a reader needs: the navigation, the quickstart's commands, the API table with its fields; no
request of the page (styles, scripts, fonts, images) may fail. A screenshot of each page is kept under
build/docs-screenshots/ as a build artefact."""

from __future__ import annotations

import functools
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.chart import tools

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "build" / "docs-screenshots"
PNG = b"\x89PNG\r\n\x1a\n"
# The top sections of mkdocs.yml's navigation, which every page's sidebar shows.
SECTIONS = ("Getting started", "Concepts", "Tasks", "Reference", "Operations", "Benchmarks", "Contributing")


@dataclass
class Page:
    """What the rendered DOM holds, as a reader would look for it."""

    text: str = ""
    nav_links: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    table_cells: list[str] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.page = Page()
        self._in_nav = 0
        self._in_cell = 0
        self._cell: list[str] = []
        self._words: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.page.ids.add(found["id"] or "")
        if tag in ("script", "style"):
            self._hidden += 1
        if tag == "nav" and (self._in_nav or "md-nav" in (found.get("class") or "")):
            self._in_nav += 1
        if tag == "a" and self._in_nav and found.get("href"):
            self.page.nav_links.append(found["href"] or "")
        if tag == "img":
            self.page.images.append(found.get("src") or "")
        if tag == "td":
            self._in_cell, self._cell = 1, []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._hidden -= 1
        if tag == "nav" and self._in_nav:
            self._in_nav -= 1
        if tag == "td" and self._in_cell:
            self._in_cell = 0
            self.page.table_cells.append(" ".join("".join(self._cell).split()))

    def handle_data(self, data: str) -> None:
        if self._hidden:
            return
        self._words.append(data)
        if self._in_cell:
            self._cell.append(data)

    def close(self) -> None:
        super().close()
        self.page.text = " ".join(" ".join(self._words).split())


class _Handler(SimpleHTTPRequestHandler):
    """Serves the site and keeps every request's path and status: a failed one is a broken page."""

    requests: list[tuple[str, int]]

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        self.requests.append((self.path, int(code) if str(code).isdigit() else 0))


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium, headless, launched by Playwright (its own browser downloads are not used)."""
    try:
        chromium = tools.chromium()
    except tools.ToolMissing as missing:
        pytest.fail(str(missing), pytrace=False)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=chromium, args=["--no-sandbox", "--disable-gpu"], timeout=60_000
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[tuple[str, int]]]]:
    """The site built as `make docs` builds it, served by python's http.server on 127.0.0.1."""
    built = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(built)],
        cwd=REPO, check=True, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    requests: list[tuple[str, int]] = []
    handler = type("Handler", (_Handler,), {"requests": requests})
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(built)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()


def open_page(browser: Browser, url: str, name: str) -> Page:
    """The page's DOM once its scripts ran and the network went quiet, and its screenshot
    (build/docs-screenshots/NAME.png).

    One Chromium for the module, driven over the DevTools protocol by Playwright: the command line's
    `--screenshot` hung past 120 s twice in 2026-11 (once in CI), as others see it do when virtual time never
    runs out or the browser does not exit after writing the file; here every step has its own deadline."""
    tab = browser.new_page(viewport={"width": 1280, "height": 1600})
    try:
        tab.goto(url, wait_until="networkidle", timeout=60_000)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shot = SCREENSHOTS / f"{name}.png"
        shot.write_bytes(tab.screenshot(timeout=60_000))
        html = tab.content()
    finally:
        tab.close()
    assert shot.read_bytes()[:8] == PNG, f"{name}: no screenshot"
    # A blank 1280x1600 page compresses to a few KB; a page of words and tables to far more.
    assert shot.stat().st_size > 30_000, f"{name}: the screenshot looks blank ({shot.stat().st_size} bytes)"
    reader = _Reader()
    reader.feed(html)
    reader.close()
    return reader.page


def assert_whole(page: Page, base: str, requests: list[tuple[str, int]], name: str) -> None:
    """The navigation is there, every image loads, and no request of the page failed."""
    for section in SECTIONS:
        assert section in page.text, f"{name}: the navigation lacks {section!r}"
    assert len(page.nav_links) > 20, f"{name}: the navigation has {len(page.nav_links)} links"
    for src in page.images:
        with urllib.request.urlopen(urllib.parse.urljoin(base, src), timeout=10) as answer:
            assert answer.status == 200 and answer.headers["Content-Type"].startswith("image/"), src
    failed = [(path, code) for path, code in requests if code >= 400]
    assert not failed, f"{name}: requests failed: {failed}"


@pytest.mark.slow
def test_home_quickstart_and_api_reference_read_in_a_browser(browser, site):
    base, requests = site
    home = open_page(browser, f"{base}/", "home")
    assert_whole(home, f"{base}/", requests, "home")
    assert "make run" in home.text and "make test" in home.text
    assert "tpujob operator" in home.text  # the picture of the flow

    quickstart_url = f"{base}/getting-started/sandbox/"
    quickstart = open_page(browser, quickstart_url, "quickstart")
    assert_whole(quickstart, quickstart_url, requests, "quickstart")
    commands = ("tpujob sandbox up", "tpujob sandbox operator", "kubectl apply -f examples/v5e-single-host")
    for command in commands:
        assert command in quickstart.text, command

    api_url = f"{base}/reference/api/"
    api = open_page(browser, api_url, "api")
    assert_whole(api, api_url, requests, "api")
    assert "tpujobspectpu" in api.ids, "no section for spec.tpu"
    for cell in ("tpu (required)", "topology (required)", "slices", "capacity", "trainer (required)"):
        assert cell in api.table_cells, f"the API table lacks {cell!r}"
    assert "Rules" in api.text and "not a v5e topology; valid: 1x1, 2x2" in api.text
