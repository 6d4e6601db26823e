"""The server's request validators, built from openapi.yaml, agree with a JSON Schema validator
(jsonschema-rs, which follows ECMA-262 regex semantics as JSON Schema requires)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.conformance import SchemaViolation, validate_schema
from volcano_server.http._schema import SchemaError, ValidationFailure, compile_schema
from volcano_server.http._spec import load_spec

SPEC = load_spec()

UUIDISH = st.one_of(
    st.uuids().map(str),
    st.uuids().map(lambda u: str(u).upper()),
    st.uuids().map(lambda u: str(u) + "\n"),
    st.text(alphabet="0123456789abcdefABCDEF-xz\n ", min_size=30, max_size=40),
)
EDGES = st.sampled_from(
    [
        0,
        0.05,
        0.0999,
        0.1,
        1,
        1.0,
        1.5,
        5.5,
        86400,
        86400.0001,
        2**53 - 1,
        2**53,
        -1,
        True,
        False,
        float("inf"),
        float("-inf"),
        float("nan"),
        1e308,
    ]
)
NUMBERS = st.one_of(
    EDGES,
    st.integers(min_value=-5, max_value=2**54),
    st.floats(allow_nan=True, allow_infinity=True),
)
VALUES = st.one_of(
    NUMBERS, UUIDISH, st.none(), st.text(max_size=5), st.lists(st.integers(), max_size=2)
)
VALID = {
    "owner_token": st.uuids().map(str),
    "fencing_token": st.integers(min_value=1, max_value=2**53 - 1),
    "ttl_seconds": st.floats(min_value=0.1, max_value=86400),
    # Labels: printable ASCII of any length around the bound, and any text (controls,
    # non-ASCII, astral characters) for the pattern's edges.
    "label": st.one_of(
        st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=205),
        st.text(max_size=8),
    ),
}


FIELDS = {
    "acquireLock": ("owner_token", "ttl_seconds"),
    "renewLock": ("owner_token", "fencing_token", "ttl_seconds"),
    "releaseLock": ("owner_token", "fencing_token"),
}


@st.composite
def bodies(draw: st.DrawFn, operation_id: str) -> Any:
    """A valid body with one field replaced (often by an edge value), dropped or added."""
    if draw(st.integers(0, 9)) == 0:
        return draw(VALUES)
    fields = FIELDS[operation_id]
    body = {name: draw(VALID[name]) for name in fields}
    mutation = draw(st.sampled_from(["none", "replace", "replace", "drop", "add"]))
    name = draw(st.sampled_from(fields))
    if mutation == "replace":
        body[name] = draw(st.one_of(EDGES, VALUES))
    elif mutation == "drop":
        del body[name]
    elif mutation == "add":
        body[draw(st.sampled_from(["extra", "OWNER_TOKEN", "", *VALID]))] = draw(VALUES)
    return body


KEYS = st.one_of(
    st.text(max_size=300),
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,20}", fullmatch=True),
    st.integers(250, 260).map(lambda n: "k" * n),
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,10}", fullmatch=True).map(lambda k: k + "\n"),
)


def accepts(operation_id: str, body: Any) -> bool:
    validate = SPEC.operation(operation_id).body
    assert validate is not None
    try:
        validate(body, "")
    except ValidationFailure:
        return False
    return True


def reference_accepts(operation_id: str, body: Any) -> bool:
    schema = {
        "acquireLock": "AcquireRequest",
        "renewLock": "RenewRequest",
        "releaseLock": "ReleaseRequest",
        "renewLeases": "RenewLeasesRequest",
    }[operation_id]
    try:
        validate_schema(body, f"/components/schemas/{schema}")
    except SchemaViolation:
        return False
    return True


@st.composite
def batches(draw: st.DrawFn) -> Any:
    """A batch of 0 to 4 entries (or, with `maxItems` shrunk away, hundreds), some mutated."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.one_of(VALUES, st.just({}), st.just({"leases": None})))
    count = draw(st.sampled_from([0, 1, 2, 4, 500, 501]))
    entry = {"key": draw(KEYS), **{name: draw(VALID[name]) for name in FIELDS["renewLock"]}}
    entries = [dict(entry) for _ in range(count)]
    if entries and draw(st.booleans()):
        entries[draw(st.integers(0, count - 1))] = draw(bodies("renewLock"))
    body: dict[str, Any] = {"leases": entries}
    if draw(st.integers(0, 9)) == 0:
        body["extra"] = draw(VALUES)
    return body


class TestAgainstJsonSchema:
    @settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
    @given(body=batches())
    def test_batches_same_verdict_as_jsonschema(self, body: Any) -> None:
        """A batch renewal's body: arrays, their bounds and their entries, as jsonschema says."""
        assert accepts("renewLeases", body) == reference_accepts("renewLeases", body)

    @pytest.mark.parametrize("operation_id", ["acquireLock", "renewLock", "releaseLock"])
    @settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
    @given(data=st.data())
    def test_same_verdict_as_jsonschema(self, operation_id: str, data: st.DataObject) -> None:
        """For any JSON value, the compiled validator accepts exactly what jsonschema accepts."""
        body = data.draw(bodies(operation_id))
        assert accepts(operation_id, body) == reference_accepts(operation_id, body)

    @settings(max_examples=300, deadline=None)
    @given(key=KEYS)
    def test_path_key_same_verdict_as_jsonschema(self, key: str) -> None:
        """The path key validator agrees with jsonschema on the LockKey schema."""
        try:
            SPEC.operation("getLock").path_params["key"](key, "key")
            ours = True
        except ValidationFailure:
            ours = False
        try:
            validate_schema(key, "/components/schemas/LockKey")
            theirs = True
        except SchemaViolation:
            theirs = False
        assert ours == theirs


class TestMessages:
    def test_normalises_numbers(self) -> None:
        """Integral floats become ints for integer fields; ttls become floats."""
        body = SPEC.operation("renewLock").body
        assert body is not None
        checked = body(
            {
                "owner_token": "0F8FAD5B-D9CB-469F-A165-70867728950E",
                "fencing_token": 3.0,
                "ttl_seconds": 2,
            },
            "",
        )
        assert checked["fencing_token"] == 3
        assert isinstance(checked["fencing_token"], int)
        assert isinstance(checked["ttl_seconds"], float)

    def test_a_bad_entry_is_named_by_its_index(self) -> None:
        """A batch entry's failure names the entry: `leases[1].fencing_token`."""
        good = {
            "key": "k",
            "owner_token": "0F8FAD5B-D9CB-469F-A165-70867728950E",
            "fencing_token": 1,
            "ttl_seconds": 5,
        }
        body = SPEC.operation("renewLeases").body
        assert body is not None
        with pytest.raises(ValidationFailure, match=r"^leases\[1\]\.fencing_token: must be at"):
            body({"leases": [good, {**good, "fencing_token": 0}]}, "")

    def test_trailing_newline_never_matches(self) -> None:
        """Patterns match whole strings: "key\\n" is not a key."""
        with pytest.raises(ValidationFailure, match="must match"):
            SPEC.operation("getLock").path_params["key"]("key\n", "key")


class TestCompilerRefusesWhatItCannotEnforce:
    @pytest.mark.parametrize(
        "schema",
        [
            {"type": "object", "properties": {}},  # additionalProperties not false
            {"type": "string", "format": "x", "pattern": "[a-z]"},  # unanchored pattern
            {"type": "string", "multipleOf": 2},
            {"oneOf": [{"type": "string"}]},
            {"type": ["string", "integer"]},
            {"type": ["null", "null"]},
            {"type": ["string", "integer", "null"]},
            {"$ref": "#/components/schemas/Uuid", "maxLength": 40},  # a constraint beside $ref
            {"type": "array", "items": {"type": "string"}},  # no maxItems: no bound on work
            {"type": "array", "maxItems": 3},  # items unsaid
            {"type": "array", "items": {"type": "string"}, "maxItems": 3, "uniqueItems": True},
        ],
    )
    def test_unknown_constructs_fail_at_start_up(self, schema: dict[str, Any]) -> None:
        """A schema rule the server could not enforce stops the server from starting."""
        with pytest.raises(SchemaError):
            compile_schema(schema, lambda ref: {})

    def test_one_type_or_null(self) -> None:
        """`type: [T, "null"]` takes null, and T's values by T's rules."""
        validator = compile_schema(
            {"type": ["string", "null"], "maxLength": 2, "pattern": "^[a-z]*$"}, lambda ref: {}
        )
        assert validator(None, "label") is None
        assert validator("ab", "label") == "ab"
        for bad in ("abc", "A", 1):
            with pytest.raises(ValidationFailure, match="label"):
                validator(bad, "label")

    def test_a_schema_of_annotations_takes_any_value(self) -> None:
        """A schema without a type (annotations only) takes any JSON value, as JSON Schema's."""
        validator = compile_schema({"description": "anything"}, lambda ref: {})
        for value in (None, 1, "x", [1, {"a": None}], {"b": [True]}):
            assert validator(value, "json") == value

    def test_field_counts_are_enforced(self) -> None:
        """minProperties and maxProperties bound how many fields an object has."""
        validator = compile_schema(
            {
                "type": "object",
                "additionalProperties": False,
                "minProperties": 1,
                "maxProperties": 1,
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            },
            lambda ref: {},
        )
        assert validator({"a": 1}, "c") == {"a": 1}
        for bad in ({}, {"a": 1, "b": 2}):
            with pytest.raises(ValidationFailure, match=r"^c: must have exactly 1 of its fields"):
                validator(bad, "c")

    def test_annotations_beside_a_ref_are_allowed(self) -> None:
        """`format: uuid` beside a $ref compiles to the referenced schema's rules."""
        uuid = {"type": "string", "pattern": "^[0-9a-f]{2}$"}
        validator = compile_schema({"$ref": "#/x", "format": "uuid"}, lambda ref: uuid)
        assert validator("0f", "h") == "0f"
        with pytest.raises(ValidationFailure, match="must match"):
            validator("0g", "h")

    def test_every_operation_of_the_spec_is_compiled(self) -> None:
        """Routes and validators exist for every operation in openapi.yaml."""
        assert {op.operation_id for op in SPEC.operations} == {
            "acquireLock",
            "renewLock",
            "renewLeases",
            "releaseLock",
            "getLock",
            "forceReleaseLock",
            "checkLease",
            "listLocks",
            "listHolders",
            "listGroups",
            "createGroup",
            "getGroup",
            "deleteGroup",
            "listMembers",
            "getMember",
            "removeMember",
            "joinGroup",
            "renewMembership",
            "updateCapabilities",
            "leaveGroup",
            "renewMemberships",
            "getHealth",
        }
        assert all("x-request-id" in op.headers for op in SPEC.operations if op.authenticated)

    @pytest.mark.parametrize("text", ["42", "1", "9007199254740991"])
    def test_an_integer_path_parameter_is_parsed(self, text: str) -> None:
        """A fencing token in the path is digits, parsed to an int and checked by its schema."""
        check = SPEC.operation("checkLease").path_params["fencing_token"]
        assert check(text, "fencing_token") == int(text)

    @pytest.mark.parametrize(
        "text", ["", "0", "-1", "+1", " 1", "1.0", "\uff11", "1_000", "9007199254740992", "9" * 30]
    )
    def test_an_integer_path_parameter_refuses_other_spellings(self, text: str) -> None:
        """Only plain ASCII digits in the schema's range: no sign, space, separator or other
        digit that int() would take."""
        check = SPEC.operation("checkLease").path_params["fencing_token"]
        with pytest.raises(ValidationFailure, match="fencing_token"):
            check(text, "fencing_token")


class TestQueryParameters:
    @pytest.mark.parametrize(
        ("name", "text", "value"),
        [
            ("after_version", "0", 0),
            ("after_version", "9007199254740991", 2**53 - 1),
            ("wait_seconds", "30", 30.0),
            ("wait_seconds", "2.5", 2.5),
            ("wait_seconds", "0", 0.0),
            ("wait_seconds", "1e1", 10.0),
            ("wait_seconds", "2.2250738585e-313", 2.2250738585e-313),
        ],
    )
    def test_numbers_are_parsed_from_digits(self, name: str, text: str, value: object) -> None:
        """A version is plain digits; a wait is a number as JSON writes one."""
        assert SPEC.operation("getLock").query[name](text, name) == value

    @pytest.mark.parametrize(
        ("name", "text"),
        [
            ("after_version", ""),
            ("after_version", "-1"),
            ("after_version", "+1"),
            ("after_version", "1.0"),
            ("after_version", " 1"),
            ("after_version", "\uff11"),
            ("after_version", "9007199254740992"),
            ("after_version", "9" * 40),
            ("wait_seconds", "1e"),
            ("wait_seconds", "01"),
            ("wait_seconds", "+1"),
            ("wait_seconds", ".5"),
            ("wait_seconds", "5."),
            ("wait_seconds", "nan"),
            ("wait_seconds", "inf"),
            ("wait_seconds", "60.001"),
            ("wait_seconds", "-0.1"),
        ],
    )
    def test_other_spellings_are_refused(self, name: str, text: str) -> None:
        """No sign, space, bare point, leading zero or other digit; bounds on the number."""
        with pytest.raises(ValidationFailure, match=name):
            SPEC.operation("getLock").query[name](text, name)

    def test_strings_follow_their_schema(self) -> None:
        """A prefix is up to 255 key characters, an empty one included."""
        query = SPEC.operation("listLocks").query
        assert query["prefix"]("", "prefix") == ""
        assert query["after"]("report-daily", "after") == "report-daily"
        for text in ("a/b", "a b", "x" * 256, "é"):
            with pytest.raises(ValidationFailure, match="prefix"):
                query["prefix"](text, "prefix")

    def test_operations_without_query_parameters_have_none(self) -> None:
        """Only the gets that watch (a key, a group) and the listings declare query parameters."""
        declared = {op.operation_id: sorted(op.query) for op in SPEC.operations if op.query}
        assert declared == {
            "getLock": ["after_version", "wait_seconds"],
            "listLocks": ["after", "limit", "prefix"],
            "listHolders": ["after", "limit"],
            "getGroup": ["after_version", "wait_seconds"],
            "listGroups": ["after", "limit", "prefix"],
            "listMembers": ["after", "limit"],
        }
