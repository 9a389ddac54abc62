"""Fields of a JSON object read back from a file (rows.json, the journal, an xdist report), each
checked for its type: a typed result's ``from_dict`` reads its object through these, so a value of
the wrong type is a ``ValueError`` naming the field, never a wrong type inside a frozen dataclass.

Numbers are given back as they were stored (an int stays an int), so a row read and written again
is the same text. No torch, no pytest.
"""

from __future__ import annotations

from collections.abc import Mapping

JsonObject = Mapping[str, object]  # a JSON object as read: values not yet checked


def _wrong(key: str, want: str, value: object) -> ValueError:
    return ValueError(f"field {key!r} must be {want}, got {type(value).__name__}")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number(data: JsonObject, key: str, default: float | None = None) -> float:
    value = data.get(key, default)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    raise _wrong(key, "a number", value)


def opt_number(data: JsonObject, key: str) -> float | None:
    return None if data.get(key) is None else number(data, key)


def integer(data: JsonObject, key: str, default: int | None = None) -> int:
    value = data.get(key, default)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise _wrong(key, "an integer", value)


def opt_integer(data: JsonObject, key: str) -> int | None:
    return None if data.get(key) is None else integer(data, key)


def text(data: JsonObject, key: str, default: str | None = None) -> str:
    value = data.get(key, default)
    if isinstance(value, str):
        return value
    raise _wrong(key, "a string", value)


def opt_text(data: JsonObject, key: str) -> str | None:
    return None if data.get(key) is None else text(data, key)


def flag(data: JsonObject, key: str, default: bool) -> bool:
    value = data.get(key, default)
    if isinstance(value, bool):
        return value
    raise _wrong(key, "true or false", value)


def numbers(data: JsonObject, key: str) -> tuple[float, ...]:
    value = data.get(key)
    if isinstance(value, (list, tuple)) and all(_is_number(v) for v in value):
        return tuple(value)
    raise _wrong(key, "a list of numbers", value)


def strings(data: JsonObject, key: str) -> tuple[str, ...]:
    """A list of strings; absent or null: empty."""
    value = data.get(key) or ()
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise _wrong(key, "a list of strings", value)


def pair(data: JsonObject, key: str) -> tuple[float, float]:
    got = numbers(data, key)
    if len(got) != 2:
        raise ValueError(f"field {key!r} must be two numbers, got {len(got)}")
    return got[0], got[1]


def opt_pair(data: JsonObject, key: str) -> tuple[float, float] | None:
    return pair(data, key) if data.get(key) else None


def obj(data: JsonObject, key: str) -> JsonObject:
    value = data.get(key)
    if isinstance(value, Mapping):
        return value
    raise _wrong(key, "an object", value)


def opt_obj(data: JsonObject, key: str) -> JsonObject | None:
    return None if data.get(key) is None else obj(data, key)


def objects(data: JsonObject, key: str) -> list[JsonObject]:
    """A list of objects; absent or null: empty."""
    value = data.get(key) or []
    if isinstance(value, (list, tuple)) and all(isinstance(v, Mapping) for v in value):
        return list(value)
    raise _wrong(key, "a list of objects", value)


def opt_str_map(data: JsonObject, key: str) -> dict[str, str] | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, Mapping) and all(isinstance(v, str) for v in value.values()):
        return {str(k): v for k, v in value.items()}
    raise _wrong(key, "an object of strings", value)


def opt_number_map(data: JsonObject, key: str) -> dict[str, float] | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, Mapping) and all(_is_number(v) for v in value.values()):
        return {str(k): v for k, v in value.items()}
    raise _wrong(key, "an object of numbers", value)
