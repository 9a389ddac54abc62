"""False-alarm control across a night: Holm (family-wise) or Benjamini-Hochberg (false discovery).

Each check's rule alone holds its own false-alarm rate; a night of m checks multiplies it. Here
the speed FAILs of one session are decided together from each check's one-sided p-value of H0
"slowdown <= tolerance" (``decision.Stage.p_value``, carried as ``Decision.p_value``):

- ``holm``: Holm (1979), "A simple sequentially rejective multiple test procedure", Scand. J.
  Statist. 6:65-70. The chance of one or more false FAILs in a night is at most ``alpha``, for any
  dependence between the checks.
- ``bh``: Benjamini & Hochberg (1995), "Controlling the false discovery rate", J. R. Statist.
  Soc. B 57:289-300. The expected share of false FAILs among the night's FAILs is at most
  ``alpha`` (independent or positively dependent checks); more power when many checks regress.
- ``none``: each check's own rule (its confirm quantile) only.

A check enters the family when its verdict could have been a speed FAIL (PASS, FAIL, IMPROVED,
ADVISORY); a check never tested as a suspect has p = 1 (the screen is a filter: a check's
final p-value is the confirm's when the screen passed it on, which is still a valid p-value).
NEW, STALE, INCONCLUSIVE and correctness failures are outside the family and keep their verdicts.
A speed FAIL survives the night only if its own rule failed it *and* the controller rejects it.
Pure: no torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

# The methods and their defaults are option values, so they live with the config (a lower layer).
from pytest_convperf.core.options import DEFAULT_ALPHA, DEFAULT_METHOD, METHODS, Method

if TYPE_CHECKING:
    from pytest_convperf.judge.check_row import CheckRow

FAMILY_VERDICTS = frozenset({"PASS", "FAIL", "IMPROVED", "ADVISORY"})


def _ranked(pvalues: Sequence[float]) -> list[int]:
    """Indices of ``pvalues`` from the smallest p up, after checking each lies in [0, 1]."""
    for p in pvalues:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"a p-value must lie in [0, 1], got {p!r}")
    return sorted(range(len(pvalues)), key=lambda i: pvalues[i])


def holm_adjusted(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values: ``max_{j<=i} min(1, (m - j + 1) p_(j))`` in the input order."""
    order = _ranked(pvalues)
    m = len(pvalues)
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def bh_adjusted(pvalues: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values: ``min_{j>=i} min(1, m p_(j) / j)`` in the input order."""
    order = _ranked(pvalues)
    m = len(pvalues)
    out = [1.0] * m
    running = 1.0
    for rank in range(m - 1, -1, -1):
        i = order[rank]
        running = min(running, m * pvalues[i] / (rank + 1))
        out[i] = running
    return out


def adjusted(pvalues: Sequence[float], method: Method) -> list[float]:
    """Adjusted p-values for ``method`` (``none`` returns them unchanged)."""
    if method == "holm":
        return holm_adjusted(pvalues)
    if method == "bh":
        return bh_adjusted(pvalues)
    if method == "none":
        _ranked(pvalues)
        return list(pvalues)
    raise ValueError(f"unknown false-alarm control {method!r}; choose one of {', '.join(METHODS)}")


def family_p_value(verdict: str, p_value: float | None) -> float | None:
    """A check's p-value in the night's family, or None when it is outside (NEW, STALE, ...).

    Works from a ``Decision`` (``verdict.value``, ``p_value``) or a row dict alike.
    """
    if verdict not in FAMILY_VERDICTS:
        return None
    return 1.0 if p_value is None else float(p_value)


def check_id(row: CheckRow) -> str:
    """A check's name in the night's family: its test and its baseline key (one test may make several)."""
    return check_name(row.nodeid, row.key)


def check_name(nodeid: str | None, key: str | None) -> str:
    """:func:`check_id` from the parts, for code that has no row yet (a fresh-process confirm)."""
    return f"{nodeid or '?'} [{key or '?'}]"


def checks_from_rows(rows: Iterable[CheckRow]) -> dict[str, tuple[str, float | None]]:
    """``{check_id: (verdict, p_value)}`` from result rows (the p-value of ``row.decision``)."""
    out: dict[str, tuple[str, float | None]] = {}
    for row in rows:
        p = row.decision.p_value if row.decision is not None else None
        out[check_id(row)] = (
            str(row.verdict),
            None if p is None else float(p),
        )
    return out


class NightControlDict(TypedDict):
    """:meth:`NightControl.to_dict`: ``night.json`` and the report hook's ``night``."""

    method: str
    alpha: float
    m: int
    per_check_alpha: float
    expected_uncontrolled: float
    fails: list[str]
    cleared: list[str]
    adjusted: dict[str, float]
    summary: str


@dataclass(frozen=True)
class NightControl:
    """The controller's answer for one session.

    ``fails``: keys whose speed FAIL stands; ``cleared``: keys the per-check rule failed but the
    night does not (reported as suspects, not failures); ``adjusted``: adjusted p per family key.
    ``expected_uncontrolled``: false FAILs the night would expect under each check's own rule
    alone (``m * per_check_alpha``, every check at the edge of its tolerance, the worst case).
    """

    method: Method
    alpha: float
    m: int
    per_check_alpha: float
    fails: tuple[str, ...]
    cleared: tuple[str, ...]
    adjusted: Mapping[str, float]

    @property
    def expected_uncontrolled(self) -> float:
        return self.m * self.per_check_alpha

    def to_dict(self) -> NightControlDict:
        """The JSON form (``night.json``, the report hook's ``night``)."""
        return NightControlDict(
            method=self.method,
            alpha=self.alpha,
            m=self.m,
            per_check_alpha=self.per_check_alpha,
            expected_uncontrolled=self.expected_uncontrolled,
            fails=list(self.fails),
            cleared=list(self.cleared),
            adjusted=dict(self.adjusted),
            summary=self.summary(),
        )

    def summary(self) -> str:
        """One line for the terminal and the report: method, family size, false-alarm expectation."""
        base = (
            f"{self.m} check{'' if self.m == 1 else 's'} judged together; each check's own rule alone "
            "would expect up to "
            f"{self.expected_uncontrolled:.2g} false FAILs in this session"
        )
        if self.method == "holm":
            how = f"Holm: P(any false FAIL in this session) <= {self.alpha:g}"
        elif self.method == "bh":
            how = f"Benjamini-Hochberg: expected share of false FAILs among FAILs <= {self.alpha:g}"
        else:
            how = "no session-wide control (--convperf-false-alarms=none)"
        tail = (
            f"; {len(self.cleared)} per-check FAIL(s) not significant across the session"
            if self.cleared
            else ""
        )
        return f"false alarms: {how}; {base}{tail}"


def control(
    checks: Mapping[str, tuple[str, float | None]],
    *,
    method: Method = DEFAULT_METHOD,
    alpha: float = DEFAULT_ALPHA,
    per_check_alpha: float,
) -> NightControl:
    """Decide the night's speed FAILs from ``{key: (verdict, p_value)}`` of every check it made.

    ``per_check_alpha`` is ``1 - policy.confirm_q`` (the rate each check's rule holds alone).
    A key FAILs when its verdict is FAIL and its adjusted p-value is at most ``alpha``.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"the session's false-alarm level must lie in (0, 1), got {alpha!r}")
    family = {k: p for k, (v, pv) in checks.items() if (p := family_p_value(v, pv)) is not None}
    keys = sorted(family)
    adj = dict(zip(keys, adjusted([family[k] for k in keys], method)))
    failed = [k for k in keys if checks[k][0] == "FAIL"]
    if method == "none":
        fails, cleared = failed, []
    else:
        fails = [k for k in failed if adj[k] <= alpha]
        cleared = [k for k in failed if adj[k] > alpha]
    return NightControl(method, alpha, len(keys), per_check_alpha, tuple(fails), tuple(cleared), adj)
