"""``python -m treeopt ARGS`` run inside the test process, returning what the subprocess would.

A new Python process pays for importing torch and transformers on every command (seconds each,
and most of the CLI tests' time); the test process has them imported already. What a subprocess
gives a test is kept: the exit status (2 for argparse's refusals, 1 and the traceback on stderr
for an uncaught exception), stdout and stderr as text, Python's own warning filters with warnings
written to stderr, the logging of handlers that write to stderr, the working directory and the
environment asked for, progress bars off where ``TQDM_DISABLE`` asks (tqdm reads it only when
imported). Global state a command may change (the working directory, the environment, torch's
thread count, the random generators) is restored after it. ``python -m treeopt`` itself is still
run in a subprocess by the tests of the entry point and of progress bars.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import random
import subprocess
import sys
import threading
import traceback
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from unittest import mock

# the filters a new interpreter starts with (``python -W`` and PYTHONWARNINGS unset)
_DEFAULT_FILTERS = (("ignore", ResourceWarning), ("ignore", ImportWarning),
                    ("ignore", PendingDeprecationWarning), ("ignore", DeprecationWarning))


def treeopt(*args: object, cwd: str | Path | None = None, env: Mapping[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    """``treeopt ARGS`` (arguments as ``str``), as ``subprocess.run([python, "-m", "treeopt",
    *args], cwd=cwd, env=env, capture_output=True, text=True)`` would return it."""
    from treeopt.cli import main

    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    with _kept_state(), _environment(env), _directory(cwd), _stderr_logging(err), \
            _python_warnings(err), _progress_bars(env), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse: --help (0) or a refused flag (2)
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
        except Exception:  # what the interpreter prints and exits 1 on
            traceback.print_exc(file=sys.stderr)
            code = 1
    return subprocess.CompletedProcess(["treeopt", *argv], code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None) -> Iterator[None]:
    saved = dict(os.environ)
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _directory(cwd: str | Path | None) -> Iterator[None]:
    saved = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved)


@contextlib.contextmanager
def _kept_state() -> Iterator[None]:
    """torch's thread count and the random generators, as they were before the command."""
    torch = sys.modules.get("torch")
    numpy = sys.modules.get("numpy")
    threads = torch.get_num_threads() if torch else None
    torch_rng = torch.random.get_rng_state() if torch else None
    numpy_rng = numpy.random.get_state() if numpy else None
    python_rng = random.getstate()
    try:
        yield
    finally:
        torch = sys.modules.get("torch")
        if torch is not None and threads is not None:
            torch.set_num_threads(threads)
            torch.random.set_rng_state(torch_rng)
        if numpy is not None:
            numpy.random.set_state(numpy_rng)
        random.setstate(python_rng)


@contextlib.contextmanager
def _stderr_logging(err: io.StringIO) -> Iterator[None]:
    """Logging handlers that write to stderr write to ``err`` meanwhile — the command's own
    records: a thread that was running before it (an earlier test's daemon thread, e.g. the
    app's warm-up) does not exist in the command's own process, so its records are dropped."""
    loggers = [logging.getLogger(), *(v for v in logging.root.manager.loggerDict.values()
                                      if isinstance(v, logging.Logger))]
    moved = [(h, h.stream) for lg in loggers for h in lg.handlers
             if type(h) is logging.StreamHandler and h.stream in (sys.stderr, sys.__stderr__)]
    foreign = {t.ident for t in threading.enumerate()} - {threading.get_ident()}
    only_ours = _ThreadFilter(foreign)
    for handler, _ in moved:
        handler.setStream(err)
        handler.addFilter(only_ours)
    try:
        yield
    finally:
        for handler, stream in moved:
            handler.setStream(stream)
            handler.removeFilter(only_ours)


class _ThreadFilter(logging.Filter):
    """Drops the records of the threads given (by ident)."""

    def __init__(self, threads: set[int | None]) -> None:
        super().__init__()
        self.threads = threads

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread not in self.threads


@contextlib.contextmanager
def _python_warnings(err: io.StringIO) -> Iterator[None]:
    """Warnings filtered as a new interpreter filters them, and printed to ``err``."""
    with warnings.catch_warnings():
        warnings.resetwarnings()
        for action, category in _DEFAULT_FILTERS:
            warnings.simplefilter(action, category)
        warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
        warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: (
            err.write(warnings.formatwarning(message, category, filename, lineno, line)))
        yield


@contextlib.contextmanager
def _progress_bars(env: Mapping[str, str] | None) -> Iterator[None]:
    """tqdm's bars off when ``env`` (else the current environment) sets ``TQDM_DISABLE``, as a
    new process's tqdm would read it."""
    if not (os.environ if env is None else env).get("TQDM_DISABLE"):
        yield
        return
    import tqdm.std

    original = tqdm.std.tqdm.__init__

    def disabled(self, *args, **kwargs):
        kwargs["disable"] = True
        original(self, *args, **kwargs)

    with mock.patch.object(tqdm.std.tqdm, "__init__", disabled):
        yield
