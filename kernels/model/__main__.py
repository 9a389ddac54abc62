"""``python -m kernels.model``: the depthwise cost model's tables and its CI check.

No arguments: the static model's seed-shape table from the sm_90 SASS of ``depthwise.cu`` (v1/v2 vs
PyTorch's native kernel), then v4's plan and static instructions per output. ``--check DIR``: the
calibrated model's error on the measured rows of ``DIR`` (exit 1 when it misses the goal);
``--held-out`` adds the leave-one-shape-out error; ``--predict V`` a variant's predicted rows;
``--fit DIR`` refits and prints the constants for ``calibration.py``. ``docs/depthwise-model.md``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from kernels import _build
from kernels.depthwise.seed import EFFICIENTNET_B0_STRIDE2
from kernels.model import calibration as cal
from kernels.model import plan_v4
from kernels.model.static import SEED, Shape, predict_all, table
from kernels.sass import KernelSass, analyze


def table_for(kernels: Sequence[KernelSass]) -> str:
    """The seed-shape table from the SASS of ``depthwise.cu``, then v4's static instructions per output
    on the seed shapes and EfficientNet-B0's stride-2 layers."""
    s2 = [Shape(n, c, hw, k, 2) for n, c, hw, k in EFFICIENTNET_B0_STRIDE2]
    return table(predict_all(kernels)) + "\n\n" + plan_v4.instr_table(kernels, [*SEED, *s2])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kernels.model", description=__doc__.split("\n")[0])
    ap.add_argument("--check", type=Path, metavar="DIR", help="a baselines/<machine> folder")
    ap.add_argument("--held-out", action="store_true", help="with --check: refit without each seed shape")
    ap.add_argument("--fit", type=Path, metavar="DIR", help="refit the calibrated constants on DIR's rows")
    ap.add_argument(
        "--predict", metavar="VARIANT", help="with --check: the variant's predicted rows (v3: NCHW and NHWC)"
    )
    args = ap.parse_args(argv)
    if args.fit:
        rows = cal.load_rows(args.fit)
        p = cal.fit(rows)
        print(cal.report(rows, cal.errors(rows, p)))
        print(cal.params_source(p))
        return 0
    if args.check:
        rows = cal.load_rows(args.check)
        errs = cal.errors(rows)
        print(cal.report(rows, errs, cal.held_out(rows) if args.held_out else None))
        if args.predict:
            print(cal.variant_table(rows, args.predict))
            print("\n".join(f"- {line}" for line in cal.goal_lines(rows, args.predict)))
        if args.predict == "v3":  # v3 also switches NHWC to fwd_nhwc_vec
            print(cal.nhwc_table(rows))
            print("\n".join(f"- {line}" for line in cal.nhwc_goal_lines(rows)))
        return 0 if cal.meets_goal(errs) else 1
    print(table_for(analyze(_build.KERNELS_ROOT / "depthwise" / "depthwise.cu")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
