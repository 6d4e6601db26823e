"""The public surface: a complete sorted __all__, documented names, no generated types."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import pickle
import pkgutil
import re
import traceback
import typing
from datetime import UTC, datetime
from pathlib import Path

import attrs
import httpx
import pytest

import volcano

PACKAGE = Path(volcano.__file__).parent
# The library's modules, the seam's included (the CLI, volcano.testing, the framework adapters
# of volcano.integrations and the tooz driver, volcano.tooz, have rules of their own).
MODULES = [
    importlib.import_module(info.name)
    for info in pkgutil.walk_packages(volcano.__path__, prefix="volcano.")
    if not info.name.startswith(
        ("volcano._cli", "volcano.testing", "volcano.integrations", "volcano.tooz")
    )
]

# Classes with public names that are implementation, not API: users never build or hold them.
INTERNAL = {
    "Acquisition",
    "Attempt",
    "AsyncEngine",
    "AsyncOwnClient",
    "AsyncSender",
    "AsyncTransport",
    "BaseClient",
    "Batch",
    "Broken",
    "BatchesUnsupported",
    "Call",
    "Clock",
    "Connection",
    "Engine",
    "EngineBase",
    "Event",
    "GuardPlan",
    "GuardTrace",
    "NeedMore",
    "Notice",
    "Operation",
    "Outcome",
    "Own",
    "OwnClient",
    "Ownership",
    "Page",
    "Renewal",
    "Schedule",
    "Sender",
    "Settings",
    "SpecMismatchError",
    "Success",
    "Timeline",
    "Transport",
    "Work",
    "WaitChain",
    "WatchCursor",
    # Groups (issue 37), and what watches of keys and of groups share.
    "AsyncWatch",
    "GroupCursor",
    "GroupPage",
    "Joining",
    "MemberPage",
    "MembershipPlan",
    "OwnershipShell",
    "VersionCursor",
    "Versioned",
    "Watch",
}

PUBLIC_CLASSES = [
    volcano.Client,
    volcano.AsyncClient,
    volcano.Locks,
    volcano.AsyncLocks,
    volcano.LockGuard,
    volcano.AsyncLockGuard,
    volcano.GuardState,
    volcano.LockLease,
    volcano.LockState,
    volcano.ForceReleaseResult,
    volcano.LockWatch,
    volcano.AsyncLockWatch,
    volcano.Elections,
    volcano.AsyncElections,
    volcano.Campaign,
    volcano.AsyncCampaign,
    volcano.Leadership,
    volcano.AsyncLeadership,
    volcano.LeaderObserver,
    volcano.AsyncLeaderObserver,
    volcano.Groups,
    volcano.AsyncGroups,
    volcano.Membership,
    volcano.GroupState,
    volcano.GroupMember,
    volcano.MemberRemoval,
    volcano.MembershipGuard,
    volcano.AsyncMembershipGuard,
    volcano.GroupWatch,
    volcano.AsyncGroupWatch,
]

FORBIDDEN_IN_SIGNATURES = [
    "_volcano_api",
    "Unset",
    "UNSET",
    "Response",
    *(
        name
        for name in httpx.__all__
        if inspect.isclass(obj := getattr(httpx, name)) and issubclass(obj, Exception)
    ),
]


def public_members(cls: type) -> list[tuple[str, object]]:
    return [
        (name, member)
        for name, member in vars(cls).items()
        if not name.startswith("_") or name in ("__init__", "__enter__", "__aenter__")
    ]


def signature_texts() -> list[tuple[str, str]]:
    texts = []
    for cls in PUBLIC_CLASSES:
        for name, member in public_members(cls):
            target = member.fget if isinstance(member, property) else member
            if isinstance(member, functools.cached_property):
                target = member.func
            if callable(target):
                texts.append((f"{cls.__name__}.{name}", str(inspect.signature(target))))
        if attrs.has(cls):
            for field in attrs.fields(cls):
                texts.append((f"{cls.__name__}.{field.name}", str(field.type)))
    for name in volcano.__all__:
        obj = getattr(volcano, name)
        if inspect.isclass(obj) and issubclass(obj, volcano.Error):
            texts.append((name, str(inspect.signature(obj.__init__))))
    return texts


class TestAll:
    def test_sorted(self) -> None:
        """__all__ is sorted."""
        assert volcano.__all__ == sorted(volcano.__all__)

    def test_every_name_exists(self) -> None:
        """Every name in __all__ is importable from volcano."""
        missing = [name for name in volcano.__all__ if not hasattr(volcano, name)]
        assert missing == []

    def test_complete(self) -> None:
        """Every public class defined in volcano's modules is exported (or known internal)."""
        unexported = []
        for module in MODULES:
            for name, obj in vars(module).items():
                defined_here = getattr(obj, "__module__", None) == module.__name__
                public = inspect.isclass(obj) and defined_here and not name.startswith("_")
                if public and name not in volcano.__all__ and name not in INTERNAL:
                    unexported.append(f"{module.__name__}.{name}")
        assert unexported == []

    def test_every_error_is_exported(self) -> None:
        """Every volcano.Error subclass is reachable as volcano.<Name>."""
        errors = [
            obj
            for obj in vars(volcano._exceptions).values()
            if inspect.isclass(obj) and issubclass(obj, volcano.Error)
        ]
        assert len(errors) > 20
        for cls in errors:
            assert getattr(volcano, cls.__name__) is cls

    def test_dir_shows_only_public_names(self) -> None:
        """dir(volcano) lists exactly __all__: no private modules, no typing helpers."""
        assert dir(volcano) == sorted(volcano.__all__)

    def test_guard_states(self) -> None:
        """GuardState names where a guard can stand; the three users act on are among them."""
        assert [state.value for state in volcano.GuardState] == [
            "new",
            "entering",
            "held",
            "at_risk",
            "releasing",
            "released",
            "lost",
            "failed",
        ]
        for guard in (volcano.LockGuard, volcano.AsyncLockGuard):
            assert isinstance(guard.state, property)
            assert callable(guard.check)

    def test_contract_names(self) -> None:
        """The names the contract fixes exist with their meaning."""
        assert issubclass(volcano.ConflictError, volcano.APIStatusError)
        assert issubclass(volcano.AuthenticationError, volcano.Error)
        assert issubclass(volcano.PermissionDeniedError, volcano.Error)
        assert issubclass(volcano.APIConnectionError, volcano.Error)
        assert (PACKAGE / "py.typed").exists()


class TestNoGeneratedTypes:
    @pytest.mark.parametrize(("where", "text"), signature_texts(), ids=lambda v: str(v)[:60])
    def test_signature_is_clean(self, where: str, text: str) -> None:
        """No public signature or field mentions a generated type, Unset, or an httpx error."""
        for forbidden in FORBIDDEN_IN_SIGNATURES:
            assert forbidden not in text, f"{where} mentions {forbidden}: {text}"

    def test_only_the_seam_imports_the_generated_client(self) -> None:
        """Exactly one package, _seam, imports _volcano_api (by statement, or by name)."""
        importers = set()
        for path in sorted(PACKAGE.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = [node.module or ""]
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    names = [node.value] if node.value.startswith("_volcano_api") else []
                if any(name.split(".")[0] == "_volcano_api" for name in names):
                    importers.add(path.parent.name)
        assert importers == {"_seam"}


class TestDocstrings:
    def test_every_public_name_is_documented(self) -> None:
        """Every exported name, and every public method and property, has a docstring."""
        undocumented = []
        for name in volcano.__all__:
            obj = getattr(volcano, name)
            if inspect.isclass(obj):
                if not obj.__doc__:
                    undocumented.append(name)
                for member_name, member in public_members(obj):
                    target = member.fget if isinstance(member, property) else member
                    if isinstance(member, functools.cached_property):
                        target = member.func
                    dunder = member_name.startswith("__")
                    if callable(target) and not dunder and not inspect.getdoc(target):
                        undocumented.append(f"{name}.{member_name}")
        assert undocumented == []

    def test_modules_are_documented(self) -> None:
        """Every module of the package says what it is for."""
        assert [m.__name__ for m in MODULES if not m.__doc__] == []


class TestGeneratedIdentifiersStayStrings:
    @pytest.mark.parametrize(
        "operation",
        [
            "acquire_lock",
            "renew_lock",
            "renew_leases",
            "release_lock",
            "get_lock",
            "force_release_lock",
        ],
    )
    def test_request_id_parameter_is_a_str(self, operation: str) -> None:
        """The generated X-Request-Id parameter is a str, never a uuid.UUID that lower-cases it."""
        module = importlib.import_module(f"_volcano_api.api.locks.{operation}")
        from _volcano_api.types import Unset

        for function in (module.sync_detailed, module.asyncio_detailed):
            assert typing.get_type_hints(function)["x_request_id"] == str | Unset

    @pytest.mark.parametrize(
        "model", ["AcquireRequest", "RenewRequest", "LeaseRenewal", "ReleaseRequest", "LockLease"]
    )
    def test_owner_token_is_a_str(self, model: str) -> None:
        """Generated models keep owner tokens as str, spelled as sent."""
        models = importlib.import_module("_volcano_api.models")
        assert typing.get_type_hints(getattr(models, model))["owner_token"] is str


ERROR_NAMES = [
    name
    for name in volcano.__all__
    if inspect.isclass(getattr(volcano, name)) and issubclass(getattr(volcano, name), volcano.Error)
]


class TestModuleNames:
    @pytest.mark.parametrize("name", [n for n in volcano.__all__ if n != "__version__"])
    def test_public_classes_say_volcano(self, name: str) -> None:
        """Every public class names `volcano` as its module, where users reach it."""
        found = getattr(volcano, name)
        assert inspect.isclass(found)
        assert (found.__module__, found.__qualname__) == ("volcano", name)

    def test_tracebacks_name_volcano(self) -> None:
        """A traceback names `volcano.AuthenticationError`, not the private module."""
        error = volcano.AuthenticationError("unknown apikey", status_code=401, code="unauthorized")
        [line] = traceback.format_exception_only(error)
        assert line == "volcano.AuthenticationError: 401 unauthorized: unknown apikey\n"

    @pytest.mark.parametrize(
        "value",
        [
            volcano.LockLease(
                key="k",
                owner_token="0F8FAD5B-D9CB-469F-A165-70867728950E",
                fencing_token=3,
                expires_at=datetime(2026, 1, 1, tzinfo=UTC),
                ttl_seconds=30.0,
            ),
            volcano.LockHolder(fencing_token=3, expires_at=datetime(2026, 1, 1, tzinfo=UTC)),
            volcano.ForceReleaseResult(key="k", released=True, fencing_token=3),
            volcano.Leader(label="a", term=3),
            volcano.GuardState.AT_RISK,
        ],
        ids=lambda value: type(value).__name__,
    )
    def test_values_pickle_by_their_public_name(self, value: object) -> None:
        """Values pickle as `volcano.X` and come back equal."""
        data = pickle.dumps(value)
        assert b"volcano._" not in data
        assert pickle.loads(data) == value  # noqa: S301 - our own bytes

    @pytest.mark.parametrize(
        "cls", [volcano.LockLease, volcano.LockState, volcano.LockHolder, volcano.Leader]
    )
    def test_type_hints_still_resolve(self, cls: type) -> None:
        """`typing.get_type_hints` (attrs, pydantic, FastAPI) reads the fields' real types."""
        hints = typing.get_type_hints(cls)
        assert hints
        assert not any(isinstance(hint, str) for hint in hints.values())


class TestRubySpelling:
    @pytest.mark.parametrize("name", ERROR_NAMES)
    def test_error_dot_name_is_the_same_class(self, name: str) -> None:
        """`volcano.Error.ConflictError` (the Ruby SDK's `Volcano::Error::ConflictError`) is
        `volcano.ConflictError`, for every error."""
        assert getattr(volcano.Error, name) is getattr(volcano, name)

    def test_an_except_clause_with_it_catches(self) -> None:
        """An except clause naming `volcano.Error.LockHeldError` catches the error it means,
        instead of raising AttributeError while the error is handled."""
        caught = None
        try:
            raise volcano.LockHeldError("held", status_code=409, code="lock_held")
        except volcano.Error.LockHeldError as error:  # type: ignore[attr-defined]
            caught = error
        assert isinstance(caught, volcano.LockHeldError)

    @pytest.mark.parametrize(
        ("owner", "name"),
        [(volcano.Error, "NoSuchError"), (volcano.Error, "status_error"),
         (volcano.Error, "_rebuild"), (volcano.ConflictError, "LockHeldError"),
         (volcano.Error, "__copy__")],
    )  # fmt: skip
    def test_anything_else_is_an_attribute_error(self, owner: type, name: str) -> None:
        """Only errors are found, only on `volcano.Error`; other names fail as on any class."""
        with pytest.raises(AttributeError, match=f"type object '{owner.__name__}' has no attri"):
            getattr(owner, name)


class TestNamespaceLists:
    @pytest.mark.parametrize(
        ("client", "namespace", "cls"),
        [
            (volcano.Client, "locks", volcano.Locks),
            (volcano.AsyncClient, "locks", volcano.AsyncLocks),
            (volcano.Client, "elections", volcano.Elections),
            (volcano.AsyncClient, "elections", volcano.AsyncElections),
        ],
    )
    def test_the_property_names_every_operation(
        self, client: type, namespace: str, cls: type
    ) -> None:
        """`client.locks` and `client.elections` list every public method of what they return,
        in the order the class defines them (the order the reference shows them)."""
        doc = inspect.getdoc(getattr(client, namespace)) or ""
        listed = re.findall(r"\b([a-z_]+)\b", doc.split(":", 1)[1])
        methods = [name for name, member in vars(cls).items() if not name.startswith("_")
                   and callable(member)]  # fmt: skip
        assert [name for name in listed if name in methods] == methods
