"""Checking the arguments of :func:`~pytest_convperf.core.strategies.conv2d_problems`: each bad value is
an ``InvalidArgument`` naming it and what is allowed; a single value where a sequence is expected
(``dtypes=torch.float32``, ``kinds="dense"``) means that one value."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis.errors import InvalidArgument

from pytest_convperf.core.problem import canonical_dtype


def check_choices(name: str, values: Sequence[object], allowed: Sequence[object] | None = None) -> None:
    if len(values) == 0:
        raise InvalidArgument(f"{name} must not be empty")
    if allowed is not None:
        bad = [v for v in values if v not in allowed]
        if bad:
            raise InvalidArgument(f"{name} has {bad!r}; allowed are {list(allowed)}")


def check_positive(name: str, values: Sequence[int], low: int = 1) -> None:
    check_choices(name, values)
    bad = [v for v in values if not isinstance(v, int) or v < low]
    if bad:
        raise InvalidArgument(f"{name} has {bad!r}; each must be an int >= {low}")


def one_or_many(value: object) -> tuple[object, ...]:
    """A sequence argument as a tuple; a single value (a string, a ``torch.dtype``, a bool) as a
    tuple of one, so ``dtypes=torch.float32`` means ``dtypes=(torch.float32,)``."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        return (value,)
    return tuple(value)


def canonical_dtype_arg(value: object) -> str:
    try:
        return canonical_dtype(value)
    except ValueError as exc:
        raise InvalidArgument(f"dtypes has {value!r}: {exc}") from None
