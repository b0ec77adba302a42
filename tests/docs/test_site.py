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
def chromium() -> Path:
    try:
        return tools.chromium()
    except tools.ToolMissing as missing:
        pytest.fail(str(missing), pytrace=False)


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


def open_page(chromium: Path, url: str, name: str, profile: Path) -> Page:
    """The page's DOM once its scripts ran, and its screenshot (build/docs-screenshots/NAME.png).

    Each chromium run has a profile of its own: a run given the folder of one whose processes are still
    ending can find that one's lock (Chromium's process singleton). A screenshot run sharing the profile
    hung for its whole 120 s once (2026-11-29, the previous run's processes not yet reaped); we read the hang
    as that, and a profile per run rules it out."""
    common = [
        str(chromium), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
        "--window-size=1280,1600", "--virtual-time-budget=3000",
    ]  # fmt: skip
    dom = subprocess.run(
        [*common, f"--user-data-dir={profile}-{name}-dom", "--dump-dom", url],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOTS / f"{name}.png"
    shot.unlink(missing_ok=True)
    subprocess.run(
        [*common, f"--user-data-dir={profile}-{name}-shot", f"--screenshot={shot}", url],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    assert shot.read_bytes()[:8] == PNG, f"{name}: no screenshot"
    # A blank 1280x1600 page compresses to a few KB; a page of words and tables to far more.
    assert shot.stat().st_size > 30_000, f"{name}: the screenshot looks blank ({shot.stat().st_size} bytes)"
    reader = _Reader()
    reader.feed(dom.stdout)
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
def test_home_quickstart_and_api_reference_read_in_a_browser(chromium, site, tmp_path):
    base, requests = site
    home = open_page(chromium, f"{base}/", "home", tmp_path / "profile")
    assert_whole(home, f"{base}/", requests, "home")
    assert "make run" in home.text and "make test" in home.text
    assert "tpujob operator" in home.text  # the picture of the flow

    quickstart_url = f"{base}/getting-started/sandbox/"
    quickstart = open_page(chromium, quickstart_url, "quickstart", tmp_path / "profile")
    assert_whole(quickstart, quickstart_url, requests, "quickstart")
    commands = ("tpujob sandbox up", "tpujob sandbox operator", "kubectl apply -f examples/v5e-single-host")
    for command in commands:
        assert command in quickstart.text, command

    api_url = f"{base}/reference/api/"
    api = open_page(chromium, api_url, "api", tmp_path / "profile")
    assert_whole(api, api_url, requests, "api")
    assert "tpujobspectpu" in api.ids, "no section for spec.tpu"
    for cell in ("tpu (required)", "topology (required)", "slices", "capacity", "trainer (required)"):
        assert cell in api.table_cells, f"the API table lacks {cell!r}"
    assert "Rules" in api.text and "not a v5e topology; valid: 1x1, 2x2" in api.text
