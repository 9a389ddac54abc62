"""The result of one correctness check (docs/design.md §6) and its message: the candidate's and the
reference's errors against the fp64 oracle, which rule passed each tensor, the failures raised."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.core.results import ErrorStats


class ConvMismatch(AssertionError):
    """The candidate's output (or a gradient) breaks the tolerance or is not finite."""

    def __init__(self, report: CorrectnessReport) -> None:
        super().__init__(report.message())
        self.report = report


class ReferenceDefect(AssertionError):
    """The reference misses even the worst-case bound of a correct implementation; the candidate
    is not to blame."""

    def __init__(self, report: CorrectnessReport) -> None:
        super().__init__(report.message())
        self.report = report


@dataclass
class CorrectnessReport:
    """Errors of the candidate and of the reference against the fp64 oracle for one problem.

    ``candidate_errors``: each tensor's errors under the rule that judged it (``ok`` is its
    verdict); ``candidate_rules``: for a tensor off the a-priori tolerance, which rule passed it
    or why none did (``tolerance.judge_against_reference``). ``reference_errors``: the reference
    under the a-priori tolerance; ``reference_bounds``: under the worst-case bound, which decides
    whether the reference is a defect.
    """

    problem: Conv2dProblem
    seed: int
    device: str
    backward: bool
    candidate: str
    reference: str
    candidate_errors: list[ErrorStats] = field(default_factory=list)
    reference_errors: list[ErrorStats] = field(default_factory=list)
    candidate_exception: str | None = None
    reference_exception: str | None = None
    # A wrong output type, shape or dtype, or inputs changed in place: no error stats then.
    candidate_wrong: str | None = None
    reference_wrong: str | None = None
    reference_bounds: list[ErrorStats] = field(default_factory=list)
    candidate_rules: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return (
            self.candidate_exception is None
            and self.candidate_wrong is None
            and all(e.ok for e in self.candidate_errors)
        )

    @property
    def reference_ok(self) -> bool:
        """The reference is a correct implementation: within the worst-case bound (not a defect)."""
        return (
            self.reference_exception is None
            and self.reference_wrong is None
            and all(e.ok for e in self.reference_bounds)
        )

    @property
    def reference_within_tolerance(self) -> bool:
        """The reference also meets the a-priori tolerance (else the reference rule may apply)."""
        return self.reference_ok and all(e.ok for e in self.reference_errors)

    def repro(self) -> str:
        """A one-line command that re-runs this check."""
        return (
            f'python -c "from pytest_convperf.correctness.oracle import reproduce; '
            f"reproduce('{self.candidate}', '{self.problem.id}', seed={self.seed}, "
            f"backward={self.backward}, device='{self.device}')\""
        )

    def _where(self) -> str:
        phases = "forward+backward" if self.backward else "forward"
        return f"{self.problem.id} (seed {self.seed}, {self.device}, {phases})"

    def _reference_note(self) -> list[str]:
        if self.reference_within_tolerance or not self.reference_ok:
            return []
        return [
            f"note: the reference {self.reference} misses the a-priori tolerance but stays within the "
            "worst-case bound of a sequential fp32 sum (gamma_K * scale): a valid implementation, "
            "so the candidate may also pass within 2x the reference's own error:",
            *_error_lines(self.reference_errors, None),
        ]

    def message(self) -> str:
        if self.ok and self.reference_ok:
            head = f"candidate {self.candidate} matches the fp64 oracle on {self._where()}"
            lines = [head, *_error_lines(self.candidate_errors, None, rules=self.candidate_rules)]
            return "\n".join([*lines, *self._reference_note()])
        if self.ok:
            head = (
                f"REFERENCE DEFECT: the reference {self.reference} disagrees with the fp64 oracle on "
                f"{self.problem.id} (seed {self.seed}, {self.device}) by more than the worst-case bound "
                f"of a correct implementation; the candidate {self.candidate} is correct. Mark the "
                "problem as a known reference defect rather than failing the kernel."
            )
            lines = [
                head,
                *_error_lines(self.reference_bounds, self.reference_exception, self.reference_wrong),
            ]
        else:
            head = f"candidate {self.candidate} is wrong on {self._where()}"
            lines = [
                head,
                *_error_lines(
                    self.candidate_errors,
                    self.candidate_exception,
                    self.candidate_wrong,
                    rules=self.candidate_rules,
                ),
            ]
            if not self.reference_ok:
                lines.append(f"note: the reference {self.reference} is also off the fp64 oracle:")
                lines.extend(
                    _error_lines(self.reference_bounds, self.reference_exception, self.reference_wrong)
                )
            lines.extend(self._reference_note())
        lines.append(f"repro: {self.repro()}")
        return "\n".join(lines)


def _error_lines(
    errors: Sequence[ErrorStats],
    exception: str | None,
    wrong: str | None = None,
    *,
    rules: Mapping[str, str] | None = None,
) -> list[str]:
    if exception is not None:
        return [f"  {exception}"]
    if wrong is not None:
        return [f"  {wrong}"]
    lines = []
    for e in errors:
        status = "ok" if e.ok else "FAIL"
        detail = (
            f"  {e.name}: {status} max_abs={e.max_abs:.3g} max_rel={e.max_rel:.3g} rel_l2={e.rel_l2:.3g} "
            f"(atol={e.atol:.3g} rtol={e.rtol:.3g}); worst at {list(e.worst_index)}: "
            f"got {e.worst_value:.6g}, expected {e.worst_expected:.6g}"
        )
        if e.nonfinite:
            detail += f"; {e.nonfinite} NaN/Inf where the oracle is finite"
        if e.violations:
            detail += f"; {e.violations}/{e.numel} elements out of tolerance"
        if rules and e.name in rules:
            detail += f"; {'passed' if e.ok else 'not passed'} by the reference rule: {rules[e.name]}"
        lines.append(detail)
    return lines
