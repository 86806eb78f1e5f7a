"""How fast the app feels on the shipped demo, on CPU:

1. opening the app (Data page fully rendered) on a second visit, once the server has loaded the
   demo: in headless chromium when /usr/bin/chromium and playwright are there, and with AppTest;
2. growing and redrawing a 64-node tree: the library calls one Trees-page run makes after the size
   slider moves (growths for every head kind, the tree's view, four figures), and the AppTest rerun;
3. a 128-token live verification (what the Verify page's button runs: warm-up, tree decoding and
   autoregressive decoding of the demo's first held-out prompt).

Each figure is the median of several runs after a warm-up, with the spread (min–max) beside it and
the target it is held to. Run: `.venv/bin/python benchmarks/bench_app.py [--repeats N]`.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
RENDERED = """() => !document.querySelector('[data-testid="stStatusWidget"]')
    && [...document.querySelectorAll('[data-testid="stMarkdownContainer"] li')].length >= 2"""


def timed(fn: Callable[[], object], *, repeats: int, warmup: int = 1) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def report(name: str, seconds: list[float], *, target_s: float) -> None:
    med = statistics.median(seconds)
    unit, scale = ("ms", 1e3) if target_s < 1 else ("s", 1.0)
    verdict = "ok" if med < target_s else "OVER TARGET"
    print(f"{name:<48} median {med * scale:8.1f} {unit}  (min {min(seconds) * scale:.1f}, "
          f"max {max(seconds) * scale:.1f}, n={len(seconds)})  target < {target_s * scale:g} "
          f"{unit}: {verdict}")


def open_with_browser(repeats: int) -> list[float] | None:
    """Seconds from navigation to the Data page fully rendered: first visit, then later ones."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not CHROMIUM.exists():
        return None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.address", "127.0.0.1", "--server.port", str(port),
         "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1366, "height": 768})
            try:
                def visit() -> None:  # a new tab of the same browser: its HTTP cache is warm
                    page = context.new_page()
                    page.goto(url)
                    page.wait_for_function(RENDERED, timeout=120_000, polling=20)
                    page.close()

                first = timed(visit, repeats=1, warmup=0)  # the server loads the demo
                return first + timed(visit, repeats=repeats, warmup=0)
            finally:
                browser.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"streamlit did not start within {timeout:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads here and in the app's server (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # the server subprocess inherits it

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from streamlit.testing.v1 import AppTest

    from treeopt.demo.load import load
    from treeopt.grow import grow
    from treeopt.workbench import plots
    from treeopt.workbench.live import live_run
    from treeopt.workbench.pricing import demo_pricing
    from treeopt.workbench.trees import growth_pair, view_tree

    t0 = time.perf_counter()
    demo = load()
    print(f"demo: {demo.paths.root} loaded in {time.perf_counter() - t0:.1f} s; torch threads "
          f"{torch.get_num_threads()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    print(", ".join(f"{k}: {t.positions:,} positions × {t.heads} heads"
                    for k, t in demo.traces.items()))

    # 1. opening the app
    if not args.no_browser:
        seconds = open_with_browser(args.repeats)
        if seconds is None:
            print("open (browser): skipped — no /usr/bin/chromium or playwright")
        else:
            print(f"{'open, first visit (chromium; loads the demo)':<48} {seconds[0]:.1f} s")
            report("open, second visit (chromium, Data rendered)", seconds[1:], target_s=3.0)
    app = str(ROOT / "app.py")
    report("open, second session (AppTest run)",
           timed(lambda: AppTest.from_file(app, default_timeout=120).run(),
                 repeats=args.repeats), target_s=3.0)

    # 2. growing and redrawing a 64-node tree, as one Trees-page run after the size slider moves
    kinds = list(demo.traces)
    caps = dict(max_nodes=128, max_depth=demo.traces[kinds[0]].heads, max_rank=10,
                constraint="none")

    def trees_page(size: int = 64) -> None:
        growths = {k: growth_pair(demo.traces[k], **caps) for k in kinds}
        growth = growths[kinds[0]]["empirical"]
        tree = growth.tree(min(size, growth.max_nodes))
        view = view_tree(tree, demo.traces[kinds[0]], method="empirical")
        plots.growth_curves({f"{k} · {m}": g.expected_accept_length
                             for k, pair in growths.items() for m, g in pair.items()})
        plots.tree_figure(tree, view.probabilities, title="tree")
        plots.widths_figure({"tree": tree.widths})
        plots.gap_curve(growth.expected_accept_length,
                        growth.evaluate(demo.heldout_traces[kinds[0]]))

    report("grow 64-node tree: one empirical growth (library)",
           timed(lambda: grow(demo.traces[kinds[0]], method="empirical", **caps),
                 repeats=args.repeats), target_s=0.2)
    report("grow + redraw: Trees page's library calls", timed(trees_page, repeats=args.repeats),
           target_s=0.2)
    at = AppTest.from_file(app, default_timeout=120)
    at.run()
    at.switch_page("app_pages/trees.py").run()
    sizes = iter([63, 64] * (args.repeats + 1))
    report("grow + redraw: Trees page rerun (AppTest)",
           timed(lambda: at.slider(key="trees_size").set_value(next(sizes)).run(),
                 repeats=args.repeats), target_s=0.2)

    # 3. a 128-token live verification of the Verify page's default tree: select's pick on the
    #    demo's measured machine (or, without a step profile, the Trees page's 64 nodes)
    kind = kinds[0]
    priced = demo_pricing(demo, kind)
    if priced is not None:
        tree = min(priced.selection.points, key=lambda p: p.batch).tree
    else:
        tree = grow(demo.traces[kind], method="empirical", max_nodes=64).tree(64)
    print(f"  verifying {kind} {tree.size}-node tree")
    runs = []

    def verify() -> None:
        runs.append(live_run(demo.model, demo.tokenizer, demo.heads[kind], tree, demo.prompts[0],
                             max_new_tokens=128, trace=demo.traces[kind]))

    report("live verification, 128 tokens (whole button)",
           timed(verify, repeats=max(args.repeats // 2, 2)), target_s=2.0)
    run = runs[-1]
    print(f"  tree decoding {run.tree_tokens_per_s:.0f} tokens/s vs autoregressive "
          f"{run.autoregressive_tokens_per_s:.0f} tokens/s ({run.speedup:.2f}×); mean accepted "
          f"length "
          f"{run.mean_accept_length:.3f} (predicted: per-step walk "
          f"{run.predicted_per_step or float('nan'):.3f}, position-weighted "
          f"{run.predicted_accept_length:.3f}); "
          f"lossless: {run.outputs_match}")


if __name__ == "__main__":
    main()
