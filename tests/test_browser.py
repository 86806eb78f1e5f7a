"""The running app in a real browser: `streamlit run app.py` driven by Debian's chromium through
Playwright. Every page is visited from the sidebar, checked for exceptions and screenshotted into
tests/artifacts/; a live verification runs on the Verify page.

Skipped without chromium or playwright, except in CI (CI=true), where both must be installed
(`scripts/install-browser`, run by `.ci/run` and by the README's test command).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from treeopt.demo.layout import default_root

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
PAGES = ["Overview", "Data", "Heads", "Trees", "Drafters", "Hardware", "Live", "Export", "Verify"]
VIEWPORT = {"width": 1366, "height": 768}  # a laptop screen


def _missing() -> list[str]:
    missing = [] if CHROMIUM.exists() else [f"{CHROMIUM} (apt-get install chromium)"]
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package (pip install -e '.[dev]')")
    return missing


if not (default_root() / "manifest.json").exists():
    pytest.skip(f"no built demo at {default_root()}", allow_module_level=True)
if _missing():
    if os.environ.get("CI") == "true":
        pytest.fail("CI must run the browser test; missing: " + ", ".join(_missing()),
                    pytrace=False)
    pytest.skip("no browser: missing " + ", ".join(_missing()), allow_module_level=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    raise TimeoutError(f"streamlit did not answer {url}/_stcore/health within {timeout:.0f} s")


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    """`streamlit run app.py` on a free local port; stopped (and waited for) at teardown."""
    port = free_port()
    log = (tmp_path_factory.mktemp("streamlit") / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.address", "127.0.0.1", "--server.port", str(port),
         "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout=180)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


@pytest.fixture(scope="module")
def browser():
    """Headless chromium (Playwright gives it a fresh temporary profile)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


# Every action and wait (a click included) may take this long: on a loaded host streamlit can
# sit on a rerun well past Playwright's default of 30 s before the sidebar answers a click.
ACTION_TIMEOUT_MS = 180_000


def open_page(browser):
    """A fresh context and page at the test viewport, every action's timeout generous."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    return context, context.new_page()


SETTLED = """() => !document.querySelector('[data-testid="stStatusWidget"]')
    && !document.querySelector('[data-stale="true"]')
    && [...document.querySelectorAll('[data-testid="stPlotlyChart"]')]
           .every(c => c.querySelector('.main-svg'))
    && [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')]
           .every(c => c.querySelector('.marks .role-mark'))
    && [...document.querySelectorAll('[data-testid="stCode"]')]
           .every(c => c.offsetParent === null || c.closest('details:not([open])')
                       || c.innerText.trim())
    && document.querySelector('[data-testid="stMain"]').scrollHeight"""


def settle(page, *, timeout_s: float = 180, quiet_s: float = 0.6) -> None:
    """Wait until the script run has finished and the page has stopped changing for ``quiet_s``
    (within ``timeout_s``: generous, so that a page that is slow on a loaded host still passes —
    speed is measured by benchmarks/bench_app.py, not here):
    no running indicator, no stale element, every Plotly and Vega-Lite chart drawn, every shown code block
    filled (a closed expander's content is laid out but not rendered, so its innerText stays
    empty: chromium hides ``details`` content with content-visibility), a steady height."""
    deadline, last, since = time.monotonic() + timeout_s, None, time.monotonic()
    while time.monotonic() < deadline:
        state = page.evaluate(SETTLED)
        if not state or state != last:
            last, since = state, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.1)
    raise TimeoutError(f"{page.url} did not settle within {timeout_s:.0f} s")


def assert_no_failure(page, name: str) -> None:
    assert page.locator('[data-testid="stException"]').count() == 0, name
    assert page.locator('[data-testid="stAlertContentError"]').count() == 0, name
    assert "Traceback" not in page.inner_text("body"), name


def screenshot(page, name: str) -> None:
    """What a laptop screen shows first (``name.png``) and the whole page (``name-full.png``):
    Streamlit scrolls inside its main block, so the window is made as tall as the content."""
    page.screenshot(path=ARTIFACTS / f"{name}.png")
    height = page.evaluate("document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    page.set_viewport_size({"width": VIEWPORT["width"], "height": max(height, VIEWPORT["height"])})
    settle(page)
    page.screenshot(path=ARTIFACTS / f"{name}-full.png")
    page.set_viewport_size(VIEWPORT)


def test_every_page_renders_and_verify_is_lossless(app_url, browser):
    ARTIFACTS.mkdir(exist_ok=True)
    context, page = open_page(browser)
    try:
        page.goto(app_url)
        page.get_by_role("heading", name="Overview", level=1).wait_for()
        for name in PAGES:
            page.locator('[data-testid="stSidebarNav"] a', has_text=name).click()
            page.get_by_role("heading", name=name, level=1).wait_for()
            settle(page)
            assert_no_failure(page, name)
            screenshot(page, name.lower())
        page.get_by_role("button", name="Run live verification").click()
        outcome = page.get_by_text("Lossless", exact=False).or_(
            page.locator('[data-testid="stAlertContentError"]'))
        outcome.first.wait_for()
        settle(page)
        assert_no_failure(page, "Verify after the run")
        assert page.locator('[data-testid="stMetric"]').count() == 4
        screenshot(page, "verify-run")
    finally:
        context.close()


def test_the_first_view_shows_what_the_cli_prints(app_url, browser, demo_cli):
    """What a person sees first: one headline per batch size, the drafter and tree
    `choose-drafter` prints on `select --demo K`'s files, predicted for held-out prompts, its
    measured figure the demo sweep's, and the drafter and tree of each pick in the figure."""
    from treeopt.demo.load import load
    from treeopt.workbench.headline import headline
    from treeopt.workbench.overview import demo_overview

    view = demo_overview(load(with_model=False))
    printed = [p for p in demo_cli["choice"]["points"] if p["context"] == view.context]
    context, page = open_page(browser)
    try:
        page.goto(app_url)
        page.get_by_role("heading", name="Overview", level=1).wait_for()
        metrics = page.locator('[data-testid="stMetric"]')
        # the heading is drawn before the answer is computed: on a busy host the page can sit
        # quiet between the two for longer than settle's quiet spell
        metrics.first.wait_for()
        settle(page)
        assert_no_failure(page, "Overview")
        shown = [(metrics.nth(i).locator('[data-testid="stMetricLabel"]').inner_text().strip(),
                  metrics.nth(i).locator('[data-testid="stMetricValue"]').inner_text().strip(),
                  metrics.nth(i).locator('[data-testid="stMetricDelta"]').inner_text().strip())
                 for i in range(metrics.count())]
        assert [label for label, _, _ in shown] == [f"batch {p['batch']}" for p in printed]
        for (_, value, delta), p, a in zip(shown, printed, view.answers, strict=True):
            assert value == headline(a).value  # the held-out prediction
            assert a.predicted.speedup == p["speedup"]  # the calibration one is select's
            assert (a.drafter, a.tree.size) == (p["drafter"], p["size"])
            assert delta == headline(a).delta
        body = page.inner_text("body")
        for p in printed:
            assert p["drafter"] in body
        assert page.locator('[data-testid="stVegaLiteChart"] .marks .role-mark').count() > 0
        screenshot(page, "first-view")
        # no Plotly chart here, yet the tab fetches Plotly's bundle once idle: the page a person
        # opens next draws with it at once (app_pages/preload.py)
        page.wait_for_function("""() => performance.getEntriesByType('resource')
            .some(e => /PlotlyChart\\.[^/]*\\.js$/.test(e.name))""", timeout=120_000)
        assert page.locator('[data-testid="stPlotlyChart"]').count() == 0
        # the detail is sent only once opened (a lighter first view): opening it shows the table
        tables = page.locator('[data-testid="stTable"]')
        assert tables.count() == 0
        page.get_by_text("Detail: every figure's source").click()
        tables.first.wait_for(timeout=120_000)
        settle(page)
        assert_no_failure(page, "Overview")
        assert "predicted, calibration" in tables.first.inner_text()
    finally:
        context.close()


FOLLOWING = ["Trees", "Hardware", "Live", "Export", "Verify"]  # the pages the pick follows to


def choose_demo(page, name: str) -> None:
    """Choose demo ``name`` (a folder of data/) in the sidebar's chooser, as a person would, and
    wait for the Overview to name its base model."""
    from treeopt.demo.layout import default_root, demo_root
    from treeopt.files import read_json
    from treeopt.workbench.demos import DemoEntry, base_model_name

    root = demo_root(name)
    if root == default_root():  # the app opens on it
        return
    base = base_model_name(read_json(root / "manifest.json"))
    page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').click()
    page.get_by_role("option", name=DemoEntry(root.name, root, base).label).click()
    page.get_by_text(base, exact=False).first.wait_for()


def assert_every_engine_tab_holds_a_file_or_a_reason(page, where: str) -> None:
    """On Export: each engine tab, clicked, shows a file (a code block) or one line saying why
    not (an alert); 0 blank tabs."""
    tabs = page.get_by_role("tab")
    assert tabs.count() > 0, where
    for t in range(tabs.count()):
        tabs.nth(t).click()
        panel = page.locator('[role="tabpanel"]:not([hidden])')
        shown = (panel.locator('[data-testid="stCode"]').count()
                 + panel.locator('[data-testid="stAlert"]').count())
        assert shown >= 1, (where, tabs.nth(t).inner_text())


@pytest.mark.parametrize("demo_name", ["demo", "smollm2"])
def test_a_newcomer_follows_the_pick_to_every_page_at_every_batch_size(app_url, browser,
                                                                       demo_name):
    """Overview → "Use this tree" → Trees, Hardware, Live, Export and Verify, for each batch
    size's pick of both shipped demos (the second chosen in the sidebar): every page names the
    same drafter, tree and held-out figure the Overview confirmed, and on Export every engine
    tab holds a file or one line saying why not (0 blank tabs)."""
    from treeopt.demo.layout import demo_root
    from treeopt.demo.load import load
    from treeopt.workbench.overview import demo_overview

    view = demo_overview(load(demo_root(demo_name), with_model=False))
    answers = [a for a in view.answers if a.tree.size]
    assert answers, f"{demo_name}: the Overview recommends no tree at any batch size"
    context, page = open_page(browser)
    try:
        page.goto(app_url)
        page.get_by_role("heading", name="Overview", level=1).wait_for()
        choose_demo(page, demo_name)
        for i, a in enumerate(answers):
            page.locator('[data-testid="stSidebarNav"] a', has_text="Overview").click()
            page.get_by_role("heading", name="Overview", level=1).wait_for()
            page.get_by_role("button", name="Use this tree").nth(i).wait_for()
            settle(page)
            page.get_by_role("button", name="Use this tree").nth(i).click()
            confirmed = page.get_by_text(f"Chosen: {a.drafter} · select's pick")
            confirmed.wait_for()
            said = confirmed.inner_text().removeprefix("Chosen: ").split(". Trees,")[0]
            assert f"at batch {a.batch} · " in said and f"{a.tree.size} node" in said
            if i == 0:
                settle(page)
                screenshot(page, f"{demo_name}-overview-chosen")
            for name in FOLLOWING:
                page.locator('[data-testid="stSidebarNav"] a', has_text=name).click()
                page.get_by_role("heading", name=name, level=1).wait_for()
                settle(page)
                where = f"{demo_name} {name} at batch {a.batch}"
                assert_no_failure(page, where)
                assert said in page.inner_text("body"), where
                if name == "Export":
                    assert_every_engine_tab_holds_a_file_or_a_reason(page, where)
                    screenshot(page, f"{demo_name}-export-batch{a.batch}")
    finally:
        context.close()
