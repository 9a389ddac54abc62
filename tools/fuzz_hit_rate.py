"""How often a default fuzz run finds a bug that fires only on a combination of edge features.

Each planted bug is a candidate that is wrong exactly when its predicate holds for the problem (for
example: dilation 2 with an even kernel). A *run* is one Hypothesis run of ``conv2d_problems()``
with default arguments, ``max_examples`` examples and its own seed, as a user's test would get; it
*hits* when some example makes the candidate wrong. The hit rate of a bug is the fraction of runs
that hit. Data and convolutions are left out: whether the candidate is wrong depends only on the
problem, so the predicate is the candidate's error.

Usage: ``python -m tools.fuzz_hit_rate [--runs 20] [--examples 100]`` prints one line per bug
with the hit rate and the share of 2000 drawn problems that trigger it. Run it on the commit before
a strategy change and after it to compare.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.core.strategies import conv2d_problems


@dataclass(frozen=True)
class PlantedBug:
    name: str
    fires: Callable[[Conv2dProblem], bool]


def _both(p: Conv2dProblem, test: Callable[[int], bool]) -> bool:
    return test(0) and test(1)


PLANTED_BUGS: tuple[PlantedBug, ...] = (
    # Wrong tap offsets when a dilated kernel has no centre tap.
    PlantedBug(
        "dilation2_x_even_kernel",
        lambda p: _both(p, lambda a: p.dilation[a] == 2 and p.kernel[a] % 2 == 0),
    ),
    # Last output row/column dropped when the strided window leaves input rows unread.
    PlantedBug(
        "stride2_x_odd_size",
        lambda p: _both(p, lambda a: p.stride[a] == 2 and (p.h, p.w)[a] % 2 == 1),
    ),
    # Padding handled as if the input were at least as large as the kernel.
    PlantedBug(
        "padding_x_input_smaller_than_kernel",
        lambda p: _both(p, lambda a: p.padding[a] > 0 and (p.h, p.w)[a] < p.kernel[a]),
    ),
    # Per-group channel count assumed even (vectorised loads of channel pairs).
    PlantedBug(
        "groups_x_odd_channels_per_group",
        lambda p: p.kind == "grouped" and (p.c_in // p.groups) % 2 == 1 and (p.c_out // p.groups) % 2 == 1,
    ),
    # The non-square-kernel path swaps the stride's h and w (visible only when they differ).
    PlantedBug(
        "nonsquare_kernel_x_nonsquare_stride",
        lambda p: p.kernel[0] != p.kernel[1] and p.stride[0] != p.stride[1],
    ),
    # Depthwise with a channel multiplier and a channel count off a multiple of 8.
    PlantedBug(
        "depthwise_multiplier_x_channel_edge",
        lambda p: p.kind == "depthwise" and p.multiplier > 1 and p.c_in % 8 in (1, 7),
    ),
)


def run_hits(
    run_seed: int,
    examples: int = 100,
    strategy: st.SearchStrategy[Conv2dProblem] | None = None,
    bugs: Sequence[PlantedBug] = PLANTED_BUGS,
) -> set[str]:
    """One run of ``examples`` examples with seed ``run_seed``: the names of the bugs it hits.

    One run serves every bug: Hypothesis draws the same examples whatever the test's outcome
    until the first failure, so "one of these examples makes bug B fire" is exactly "a test
    that fails on bug B fails in this run".
    """
    hits: set[str] = set()

    @seed(run_seed)
    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        derandomize=False,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy if strategy is not None else conv2d_problems())
    def candidate_check(problem: Conv2dProblem) -> None:
        hits.update(bug.name for bug in bugs if bug.fires(problem))

    candidate_check()
    return hits


def hit_rates(
    runs: int,
    examples: int = 100,
    strategy: st.SearchStrategy[Conv2dProblem] | None = None,
    first_seed: int = 0,
) -> dict[str, float]:
    """Fraction of ``runs`` independent seeded runs that hit each planted bug."""
    counts = dict.fromkeys((bug.name for bug in PLANTED_BUGS), 0)
    for i in range(runs):
        for name in run_hits(first_seed + i, examples, strategy):
            counts[name] += 1
    return {name: count / runs for name, count in counts.items()}


def trigger_shares(draws: int = 2000, draw_seed: int = 12345) -> dict[str, float]:
    """Share of problems, in one run of ``draws`` default draws, on which each bug fires."""
    fired = dict.fromkeys((bug.name for bug in PLANTED_BUGS), 0)

    @seed(draw_seed)
    @settings(
        max_examples=draws,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(conv2d_problems())
    def count(problem: Conv2dProblem) -> None:
        for bug in PLANTED_BUGS:
            fired[bug.name] += bug.fires(problem)

    count()
    return {name: n / draws for name, n in fired.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--examples", type=int, default=100)
    parser.add_argument("--first-seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(f"{'planted bug':40s} {'hit rate':>10s} {'triggers':>9s}")
    rates = hit_rates(args.runs, args.examples, first_seed=args.first_seed)
    shares = trigger_shares()
    for name, rate in rates.items():
        print(f"{name:40s} {rate:>9.0%} {shares[name]:>9.1%}  ({args.runs} runs x {args.examples} examples)")


if __name__ == "__main__":
    main()
