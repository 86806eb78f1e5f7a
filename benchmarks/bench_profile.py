"""Profile the verify step of a model on this machine and print each point's spread.

Defaults: the ``tiny`` preset on the CPU in fp32 (seconds); on a GPU pass e.g.
``--preset llama-2-7b --device cuda --dtype bf16``. Beside every measured point it prints the
roofline prediction for ``--hardware`` (a row name or a ``treeopt profile device`` JSON), when given.
Run: ``python benchmarks/bench_profile.py [--preset NAME] [--device cpu|cuda] ...``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from treeopt.profiling.verify_latency import profile_verify
from treeopt.roofline import Precision, load_hardware, preset, roofline


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--batch", default="1,4")
    ap.add_argument("--context", default="128,512")
    ap.add_argument("--tokens", default="1,4,16,64")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--hardware", help="print the roofline prediction beside each point")
    args = ap.parse_args()
    grid = {k: [int(x) for x in getattr(args, k).split(",")] for k in ("batch", "context", "tokens")}
    cfg = preset(args.preset)
    with tempfile.TemporaryDirectory() as tmp:
        table = profile_verify(cfg, out=Path(tmp) / "lat.json", device=args.device,
                               dtype=args.dtype, repeats=args.repeats, **grid)
    predicted = None
    if args.hardware:
        predicted = roofline(cfg, load_hardware(args.hardware), precision=Precision.from_dtypes(
            args.dtype), **grid)
    print(f"{cfg.name} on {table.device}, {args.dtype}, {args.repeats} repeats")
    print(" batch context tokens   median ms    p10 ms    p90 ms  spread" +
          ("  roofline ms" if predicted else ""))
    for r in table.records:
        if not r.ok:
            print(f"{r.batch:6d} {r.context:7d} {r.tokens:6d}   {r.error}")
            continue
        line = (f"{r.batch:6d} {r.context:7d} {r.tokens:6d} {r.ms_median:11.3f} {r.ms_p10:9.3f} "
                f"{r.ms_p90:9.3f} {r.spread:7.1%}")
        if predicted:
            line += f" {predicted.seconds(r.batch, r.context, r.tokens) * 1e3:12.3f}"
        print(line)


if __name__ == "__main__":
    main()
