"""Compile the JSON Schema subset that openapi.yaml uses for requests into fast validators.

The server validates requests with validators built from the spec at start-up, so the spec and
the server cannot drift apart. A schema keyword this compiler does not understand is an error at
start-up, not a silently skipped rule. The semantics follow JSON Schema 2020-12 (the dialect of
OpenAPI 3.1): an integer is any number with a zero fractional part, booleans are not numbers,
and `pattern` must match the whole string here because every pattern in the spec is anchored
with `^...$` (matched with `re.fullmatch`, so a trailing newline never slips through `$`).
`format` is an annotation, as 2020-12 makes it by default: every rule the server enforces is
written as a pattern or a bound beside it. A schema of annotations alone (no `type`) accepts any
JSON value, as in JSON Schema: a group member's `capabilities.json`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["SchemaError", "ValidationFailure", "Validator", "compile_schema"]

# A validator returns the value normalised (integers as int, numbers as float) or raises.
Validator = Callable[[Any, str], Any]

_IGNORED = frozenset({"description", "examples", "example", "title", "format", "$comment"})
_KNOWN = _IGNORED | {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "enum",
    "default",
    "items",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
}


class SchemaError(Exception):
    """The spec uses a schema construct this compiler does not support."""


class ValidationFailure(Exception):
    """A value breaks the schema; `str()` names the field and the rule."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}" if where else problem)


def compile_schema(
    schema: Mapping[str, Any], resolve: Callable[[str], Mapping[str, Any]]
) -> Validator:
    """Build a validator for `schema`, following `$ref`s through `resolve`."""
    while "$ref" in schema:
        # Annotations beside a reference (such as `format: uuid` on X-Request-Id, whose
        # referenced pattern already says as much) are allowed; constraints are not.
        extra = set(schema) - {"$ref"} - _IGNORED
        if extra:
            raise SchemaError(f"$ref with sibling keywords {sorted(extra)} is not supported")
        schema = resolve(schema["$ref"])
    unknown = set(schema) - _KNOWN
    if unknown:
        raise SchemaError(f"unsupported schema keywords {sorted(unknown)}")
    kind = schema.get("type")
    if kind is None and set(schema) <= _IGNORED:
        return _any_value
    if isinstance(kind, list) and len(kind) == 2 and "null" in kind and kind != ["null"] * 2:
        (base,) = (k for k in kind if k != "null")
        return _or_null(compile_schema({**schema, "type": base}, resolve))
    if not isinstance(kind, str):
        raise SchemaError(f"request schemas need a single 'type' (or one and null), got {kind!r}")
    compilers: dict[
        str, Callable[[Mapping[str, Any], Callable[[str], Mapping[str, Any]]], Validator]
    ] = {
        "object": _compile_object,
        "string": _compile_string,
        "number": _compile_number,
        "integer": _compile_number,
        "boolean": _compile_boolean,
        "array": _compile_array,
    }
    if kind not in compilers:
        raise SchemaError(f"unsupported type {kind!r}")
    validator = compilers[kind](schema, resolve)
    if "enum" in schema:
        return _with_enum(validator, list(schema["enum"]))
    return validator


def _where(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _describe(value: Any) -> str:
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return repr(shown)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    return "an array" if isinstance(value, list) else "an object"


def _compile_object(
    schema: Mapping[str, Any], resolve: Callable[[str], Mapping[str, Any]]
) -> Validator:
    if schema.get("additionalProperties", True) is not False:
        raise SchemaError("request objects must say additionalProperties: false")
    fields = {
        name: compile_schema(sub, resolve) for name, sub in schema.get("properties", {}).items()
    }
    required = list(schema.get("required", []))
    missing_props = [name for name in required if name not in fields]
    if missing_props:
        raise SchemaError(f"required fields without properties: {missing_props}")
    allowed = ", ".join(fields)
    min_properties = int(schema.get("minProperties", 0))
    max_properties = schema.get("maxProperties")
    # Absent optional fields take their schema's default, itself checked against the schema now.
    defaults = {
        name: _checked_default(fields[name], default, name)
        for name, sub in schema.get("properties", {}).items()
        if (default := _default_of(sub, resolve)) is not None
    }

    def validate_object(value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise ValidationFailure(path, f"must be an object, got {_describe(value)}")
        for name in value:
            if name not in fields:
                raise ValidationFailure(
                    _where(path, str(name)), f"unknown field (allowed: {allowed})"
                )
        for name in required:
            if name not in value:
                raise ValidationFailure(_where(path, name), "is required")
        if len(value) < min_properties or (
            max_properties is not None and len(value) > max_properties
        ):
            raise ValidationFailure(path, _count_of_fields(min_properties, max_properties))
        checked = {name: fields[name](item, _where(path, name)) for name, item in value.items()}
        return {**defaults, **checked} if defaults else checked

    return validate_object


def _count_of_fields(least: int, most: int | None) -> str:
    """What a field count rule asks for, in words (`exactly one of its fields`, ...)."""
    if least == most:
        return f"must have exactly {least} of its fields"
    if most is None:
        return f"must have at least {least} of its fields"
    return f"must have {least} to {most} of its fields"


def _any_value(value: Any, path: str) -> Any:
    """Any JSON value (a schema of annotations only)."""
    return value


def _compile_array(
    schema: Mapping[str, Any], resolve: Callable[[str], Mapping[str, Any]]
) -> Validator:
    if "items" not in schema:
        raise SchemaError("request arrays must say what their items are")
    item = compile_schema(schema["items"], resolve)
    min_items = int(schema.get("minItems", 0))
    max_items = schema.get("maxItems")
    if max_items is None:
        raise SchemaError("request arrays must have a maxItems")

    def validate_array(value: Any, path: str) -> list[Any]:
        if not isinstance(value, list):
            raise ValidationFailure(path, f"must be an array, got {_describe(value)}")
        if len(value) < min_items:
            raise ValidationFailure(path, f"must have at least {min_items} items")
        if len(value) > max_items:
            raise ValidationFailure(path, f"must have at most {max_items} items, got {len(value)}")
        # Each item's failure names its index: `leases[3].key: ...`.
        return [item(entry, f"{path}[{index}]") for index, entry in enumerate(value)]

    return validate_array


def _checked_default(validate: Validator, default: Any, name: str) -> Any:
    try:
        return validate(default, name)
    except ValidationFailure as failure:
        raise SchemaError(f"the default of {name} breaks its own schema: {failure}") from None


def _default_of(
    schema: Mapping[str, Any], resolve: Callable[[str], Mapping[str, Any]]
) -> Any | None:
    while "$ref" in schema:
        schema = resolve(schema["$ref"])
    return schema.get("default")


def _compile_string(
    schema: Mapping[str, Any], _resolve: Callable[[str], Mapping[str, Any]]
) -> Validator:
    min_length = int(schema.get("minLength", 0))
    max_length = schema.get("maxLength")
    pattern_text = schema.get("pattern")
    if pattern_text is not None and not (
        pattern_text.startswith("^") and pattern_text.endswith("$")
    ):
        raise SchemaError(f"pattern {pattern_text!r} must be anchored with ^...$")
    # fullmatch, and $ only at the very end: "^a$" must not accept "a\n".
    pattern = re.compile(pattern_text[1:-1]) if pattern_text is not None else None

    def validate_string(value: Any, path: str) -> str:
        if not isinstance(value, str):
            raise ValidationFailure(path, f"must be a string, got {_describe(value)}")
        if len(value) < min_length:
            raise ValidationFailure(path, f"must be at least {min_length} characters long")
        if max_length is not None and len(value) > max_length:
            raise ValidationFailure(path, f"must be at most {max_length} characters long")
        if pattern is not None and pattern.fullmatch(value) is None:
            raise ValidationFailure(path, f"must match {pattern_text}, got {_describe(value)}")
        return value

    return validate_string


def _compile_number(
    schema: Mapping[str, Any], _resolve: Callable[[str], Mapping[str, Any]]
) -> Validator:
    integer = schema["type"] == "integer"
    minimum = schema.get("minimum")
    maximum = schema.get("maximum")
    noun = "an integer" if integer else "a number"

    def validate_number(value: Any, path: str) -> int | float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValidationFailure(path, f"must be {noun}, got {_describe(value)}")
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ValidationFailure(path, f"must be a finite number, got {value!r}")
            if integer:
                if not value.is_integer():
                    raise ValidationFailure(path, f"must be an integer, got {value!r}")
                value = int(value)
        if minimum is not None and value < minimum:
            raise ValidationFailure(path, f"must be at least {minimum}, got {value!r}")
        if maximum is not None and value > maximum:
            raise ValidationFailure(path, f"must be at most {maximum}, got {value!r}")
        return value if integer else float(value)

    return validate_number


def _compile_boolean(
    _schema: Mapping[str, Any], _resolve: Callable[[str], Mapping[str, Any]]
) -> Validator:
    def validate_boolean(value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            raise ValidationFailure(path, f"must be true or false, got {_describe(value)}")
        return value

    return validate_boolean


def _or_null(validator: Validator) -> Validator:
    """`validator`, which also lets null through (JSON Schema's `type: [T, "null"]`)."""

    def validate_or_null(value: Any, path: str) -> Any:
        return None if value is None else validator(value, path)

    return validate_or_null


def _with_enum(validator: Validator, allowed: list[Any]) -> Validator:
    def validate_enum(value: Any, path: str) -> Any:
        value = validator(value, path)
        if value not in allowed:
            raise ValidationFailure(path, f"must be one of {allowed}, got {_describe(value)}")
        return value

    return validate_enum
