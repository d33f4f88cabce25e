"""The live runtime's machinery: a zoo model's training step under a LiveSession at an unbounded
budget (nothing evicted: wrapping, recipes and accounting only) against the plain step.

Median of repeated steps in one process, one thread; prints the medians and their ratio. Run:
`make bench` or `python benchmarks/bench_live.py [--repeat N] [--models resnet32,lstm] [--tiny]`
(--tiny: the test sizes; default: the zoo's sizes as shipped). Needs torch (the capture extra).
"""

from __future__ import annotations

import argparse
import sys

from _timing import median_seconds  # noqa: E402  (benchmarks/ is on sys.path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--models", default="", help="comma-separated zoo models (default: all)")
    ap.add_argument("--tiny", action="store_true", help="the tests' sizes instead of the shipped ones")
    args = ap.parse_args()
    try:
        import torch
    except ModuleNotFoundError:
        print("skipped: torch is not installed (pip install -e '.[capture]')")
        return 0
    from dtrlab.capture.zoo import ZOO
    from dtrlab.live.session import LiveSession

    torch.set_num_threads(1)
    names = [n for n in args.models.split(",") if n] or list(ZOO)
    print(f"{'model':12} {'plain s':>10} {'live s':>10} {'ratio':>7}  (median of {args.repeat}, "
          f"{'tiny' if args.tiny else 'shipped'} sizes)")
    for name in names:
        torch.manual_seed(0)
        step = ZOO[name].make(**(ZOO[name].tiny if args.tiny else {}))
        plain = median_seconds(step, args.repeat, warm=True)

        def live() -> None:
            with LiveSession():
                step()

        wrapped = median_seconds(live, args.repeat, warm=True)
        print(f"{name:12} {plain:10.4f} {wrapped:10.4f} {wrapped / plain:7.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
