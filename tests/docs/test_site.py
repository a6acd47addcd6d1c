"""The documentation site builds with no broken link and works in a real browser.

`mkdocs build --strict` (what `make docs` runs) fails on a broken link or anchor. Then the
built site is served on 127.0.0.1 and opened in headless Chromium: every page renders
(title, article text, no script error), every internal link found in the pages resolves
(page and anchor), and the search box finds a configuration key on the configuration
reference. Screenshots of the home page and the configuration reference are written to
$DOCS_SCREENSHOTS (if set) for a person to look at.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path

import pytest

from tests.docs.cdp import Browser, chromium_path

ROOT = Path(__file__).parents[2]
pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")


@pytest.fixture(scope="module")
def built_site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f",
         str(ROOT / "docs_site" / "mkdocs.yml"), "--site-dir", str(site)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    return site


def test_strict_build_produces_every_page(built_site):
    for page in ("index.html", "quickstart/index.html", "reference/configuration/index.html",
                 "reference/metrics/index.html", "pipelines/agentic/index.html",
                 "performance/index.html",
                 "search/search_index.json"):
        assert (built_site / page).is_file(), page
    index = json.loads((built_site / "search" / "search_index.json").read_text())
    assert any("kl_loss_coef" in d["text"] for d in index["docs"])


@pytest.fixture(scope="module")
def served(built_site):
    handler = functools.partial(_QuietHandler, directory=str(built_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def browser():
    if chromium_path() is None:
        pytest.fail("chromium is not installed: `make browser` (Debian's chromium package)")
    b = Browser()
    yield b
    b.close()


# Collected on each page: its title, article text length, element ids and internal links.
PAGE_FACTS = """(() => {
  const article = document.querySelector('article');
  const links = [...document.querySelectorAll('a[href]')].map(a => a.href)
      .filter(h => h.startsWith(location.origin));
  return {title: document.title, h1: (document.querySelector('article h1') || {}).textContent,
          text: article ? article.innerText.length : 0,
          ids: [...document.querySelectorAll('[id]')].map(e => e.id), links};
})()"""


def test_pages_render_and_internal_links_resolve(served, built_site, browser):
    pages = sorted(p.relative_to(built_site).parent.as_posix() for p in
                   built_site.rglob("index.html") if "assets" not in p.parts)
    facts = {}
    for page in pages:
        url = urllib.parse.urljoin(served, "" if page == "." else page + "/")
        browser.open(url)
        facts[url] = browser.eval(PAGE_FACTS)
        assert facts[url]["h1"], f"{url}: no page heading"
        assert facts[url]["text"] > 200, f"{url}: almost empty"
        assert "flywheel" in facts[url]["title"], url
    assert len(facts) >= 12, sorted(facts)
    broken = []
    for url, f in facts.items():
        for link in f["links"]:
            target, _, anchor = link.partition("#")
            if target.endswith("/search/search_index.json") or "/assets/" in target:
                continue
            if target not in facts:
                broken.append(f"{url} -> {link} (no such page)")
            elif anchor and urllib.parse.unquote(anchor) not in facts[target]["ids"]:
                broken.append(f"{url} -> {link} (no such anchor)")
    assert not broken, "\n".join(broken)


def test_search_finds_a_config_key(served, browser):
    browser.open(served)
    browser.wait_for("!!document.querySelector('input.md-search__input')")
    browser.eval("""(() => {
      const input = document.querySelector('input.md-search__input');
      input.focus();
      input.value = 'kl_loss_coef';
      for (const type of ['focus', 'input', 'keyup'])
        input.dispatchEvent(new Event(type, {bubbles: true}));
    })()""")
    hits = browser.wait_for("""(() => {
      const links = [...document.querySelectorAll('.md-search-result__item a')];
      return links.length ? links.map(a => a.href) : null;
    })()""", timeout_s=30)
    assert any("reference/configuration" in h for h in hits), hits


def test_screenshots(served, browser, tmp_path):
    out = Path(os.environ.get("DOCS_SCREENSHOTS", tmp_path))
    out.mkdir(parents=True, exist_ok=True)
    for name, page in (("home", ""), ("configuration", "reference/configuration/")):
        browser.open(served + page)
        browser.wait_for("document.fonts.status === 'loaded'")
        browser.screenshot(out / f"{name}.png")
        assert (out / f"{name}.png").stat().st_size > 10_000
