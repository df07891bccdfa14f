"""One request of ClickHouse's HTTP interface, answered from a ``Store``: the protocol, no sockets.

What ClickHouse's own ``HTTPHandler`` does for a read-only user, as far as a
store can: the statement comes from the ``query`` parameter and/or the POST
body; ``database`` and ``default_format`` (or the statement's own ``FORMAT``)
apply; ``param_NAME`` values bind ``{NAME:Type}`` placeholders; the result is
the engine's own bytes in that format. Every statement goes through
``check_user_statement`` (reads only, no ``KILL``, no ``INTO OUTFILE``) and
runs under ``QueryLimits`` with ``readonly=1``, like ``grpc-overhead sql``.

Errors are ClickHouse's: body ``Code: N. DB::Exception: ... (NAME) (version V)``,
the ``X-ClickHouse-Exception-Code`` header, and the HTTP status ClickHouse
gives that code (``src/Server/HTTP/exceptionCodeToHTTPStatus.cpp``).
Settings passed as URL parameters: the three limits may be lowered (a higher
value, or 0, gets the ceiling); client-protocol ones are accepted and ignored
(``IGNORED``, ``output_format_*``); any other is refused as ClickHouse refuses
it for a read-only user (Code 164).

One handle is our own: ``SNAPSHOT_PATH``, the store's snapshot (``analyzer.snapshot``) in JSON,
which serve, running every insert of the store it owns, knows exactly.
"""

from __future__ import annotations

import json
import math
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from grpc_overhead.analyzer import snapshot
from grpc_overhead.analyzer.errors import AnalyzerError, BadInput, QueryError
from grpc_overhead.analyzer.store.base import SNAPSHOT_PATH, EncodedValue, Store
from grpc_overhead.analyzer.store.user_statements import QueryLimits, output_format
from grpc_overhead.analyzer.throttle import FailedLogins, lockout_message

DEFAULT_FORMAT = "TabSeparated"
#: Longest statement taken (ClickHouse's ``max_query_size`` is 256 KiB by default).
MAX_QUERY_BYTES = 1 << 20

#: URL parameters that are not settings of the query.
TRANSPORT = frozenset({"query", "database", "default_format", "user", "password", "query_id"})
#: Client-protocol settings real clients send; they change nothing about the answer here.
IGNORED = frozenset(
    {
        "session_id",
        "session_timeout",
        "session_check",
        "compress",
        "decompress",
        "buffer_size",
        "wait_end_of_query",
        "send_progress_in_http_headers",
        "http_headers_progress_interval_ms",
        "enable_http_compression",
        "http_zlib_compression_level",
        "cancel_http_readonly_queries_on_client_close",
        "quota_key",
        "client_protocol_version",
        "role",
        "readonly",
        "extremes",
        "log_comment",
        "max_threads",
        "date_time_input_format",
    }
)
#: URL settings that lower a ``QueryLimits`` field (never above the ceiling).
LIMIT_SETTINGS = {
    "max_execution_time": "max_execution_time_s",
    "max_memory_usage": "max_memory_bytes",
    "max_result_rows": "max_result_rows",
}

#: ClickHouse's HTTP status per error name (exceptionCodeToHTTPStatus.cpp); others: 500.
_STATUS_BY_NAME: dict[str, int] = {
    "REQUIRED_PASSWORD": 401,
    **dict.fromkeys(
        (
            "UNKNOWN_USER",
            "WRONG_PASSWORD",
            "AUTHENTICATION_FAILED",
            "SET_NON_GRANTED_ROLE",
            "ACCESS_DENIED",
        ),
        403,
    ),
    **dict.fromkeys(
        (
            "BAD_ARGUMENTS",
            "CANNOT_COMPILE_REGEXP",
            "CANNOT_PARSE_TEXT",
            "CANNOT_PARSE_ESCAPE_SEQUENCE",
            "CANNOT_PARSE_QUOTED_STRING",
            "CANNOT_PARSE_DATE",
            "CANNOT_PARSE_DATETIME",
            "CANNOT_PARSE_NUMBER",
            "CANNOT_PARSE_DOMAIN_VALUE_FROM_STRING",
            "CANNOT_PARSE_IPV4",
            "CANNOT_PARSE_IPV6",
            "CANNOT_PARSE_INPUT_ASSERTION_FAILED",
            "CANNOT_PARSE_UUID",
            "DUPLICATE_COLUMN",
            "ILLEGAL_COLUMN",
            "UNKNOWN_ELEMENT_IN_AST",
            "UNKNOWN_TYPE_OF_AST_NODE",
            "THERE_IS_NO_COLUMN",
            "TOO_DEEP_AST",
            "TOO_BIG_AST",
            "UNEXPECTED_AST_STRUCTURE",
            "SYNTAX_ERROR",
            "INCORRECT_DATA",
            "TYPE_MISMATCH",
            "VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE",
        ),
        400,
    ),
    **dict.fromkeys(
        (
            "UNKNOWN_TABLE",
            "UNKNOWN_FUNCTION",
            "UNKNOWN_IDENTIFIER",
            "UNKNOWN_TYPE",
            "UNKNOWN_STORAGE",
            "UNKNOWN_DATABASE",
            "UNKNOWN_SETTING",
            "UNKNOWN_DIRECTION_OF_SORTING",
            "UNKNOWN_AGGREGATE_FUNCTION",
            "UNKNOWN_FORMAT",
            "UNKNOWN_DATABASE_ENGINE",
            "UNKNOWN_TYPE_OF_QUERY",
            "UNKNOWN_ROLE",
        ),
        404,
    ),
    "QUERY_IS_TOO_LARGE": 413,
    "NOT_IMPLEMENTED": 501,
    "SOCKET_TIMEOUT": 503,
    "CANNOT_OPEN_FILE": 503,
    "CANNOT_SCHEDULE_TASK": 503,
    "HTTP_LENGTH_REQUIRED": 411,
    "TIMEOUT_EXCEEDED": 408,
    "UNSUPPORTED_MEDIA_TYPE": 415,
}

_CONTENT_TYPES = (
    ("JSONEachRow", "application/x-ndjson; charset=UTF-8"),
    ("JSONLines", "application/x-ndjson; charset=UTF-8"),
    ("JSON", "application/json; charset=UTF-8"),
    ("CSV", "text/csv; charset=UTF-8; header=absent"),
    ("TabSeparated", "text/tab-separated-values; charset=UTF-8"),
    ("TSV", "text/tab-separated-values; charset=UTF-8"),
    ("Pretty", "text/plain; charset=UTF-8"),
    ("Vertical", "text/plain; charset=UTF-8"),
    ("Markdown", "text/markdown; charset=UTF-8"),
    ("XML", "application/xml; charset=UTF-8"),
)


def content_type(output: str) -> str:
    for prefix, value in _CONTENT_TYPES:
        if output.startswith(prefix):
            return value
    return "application/octet-stream"


@dataclass(frozen=True)
class Answer:
    """An HTTP response: status, headers, body."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Credentials:
    """The one user the interface accepts (None password: no password needed)."""

    user: str = "default"
    password: str | None = None

    def check(self, user: str | None, password: str | None) -> None:
        """Raise ``Refused`` unless (user, password) is ours; none given: the default user."""
        from grpc_overhead.analyzer.tls import same_secret

        if self.password is None:
            return
        if user is None and password is None:
            raise Refused("REQUIRED_PASSWORD", f"{self.user}: a password is required")
        same_user = same_secret((user or "default").encode(), self.user.encode())
        same_password = same_secret((password or "").encode(), self.password.encode())
        if not (same_user and same_password):
            raise Refused(
                "AUTHENTICATION_FAILED",
                f"{user or 'default'}: Authentication failed: password is incorrect, "
                "or there is no user with such name",
            )


class Refused(Exception):
    """A failure of the interface itself, by ClickHouse error name; ``retry_after``: a
    source locked out for wrong passwords (``throttle``), answered 429 with Retry-After."""

    def __init__(self, name: str, message: str, retry_after: float = 0.0) -> None:
        super().__init__(message)
        self.name = name
        self.message = message
        self.retry_after = retry_after


@dataclass
class Request:
    """What the socket layer read: method, path, URL parameters (last value wins), body."""

    method: str
    path: str
    parameters: Mapping[str, str]
    headers: Mapping[str, str]
    body: bytes = b""
    user: str | None = None
    password: str | None = None
    #: The client's address: wrong passwords are counted per source (``throttle``).
    source: str = ""


class Answerer:
    """Answers requests from ``store`` under ``limits`` for ``credentials``; thread-safe."""

    def __init__(
        self,
        store: Store,
        *,
        limits: QueryLimits | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        self.store = store
        self.limits = limits or QueryLimits()
        self.credentials = credentials or Credentials()
        self.failed_logins = FailedLogins()
        self._engine: _EngineFacts | None = None
        self._lock = threading.Lock()

    def answer(self, request: Request, abandoned: Callable[[], bool] | None = None) -> Answer:
        path = request.path.rstrip("/") or "/"
        if path in ("/ping", "/replicas_status"):
            return Answer(200, b"Ok.\n", {"Content-Type": "text/html; charset=UTF-8"})
        if path not in ("/", "/query", SNAPSHOT_PATH):
            return Answer(
                404,
                f"There is no handle {request.path}\n\nUse / or /ping for health checks.\n"
                "Send queries with POST or GET /?query=...\n".encode(),
                {"Content-Type": "text/plain; charset=UTF-8"},
            )
        query_id = request.parameters.get("query_id") or str(uuid.uuid4())
        try:
            self._authenticate(request)
            if path == SNAPSHOT_PATH:
                return self._snapshot()
            text = self._statement(request)
            if text is None:  # GET / with no query: the health check ClickHouse answers too
                return Answer(200, b"Ok.\n", {"Content-Type": "text/html; charset=UTF-8"})
            return self._run(request, text, query_id, abandoned)
        except Refused as refused:
            return self._error(
                refused.name, refused.message, query_id, retry_after=refused.retry_after
            )
        except QueryError as error:
            return self._error(None, error.message, query_id, code=error.code or 1002)
        except BadInput as error:
            return self._error("BAD_ARGUMENTS", str(error), query_id)
        except AnalyzerError as error:
            return self._error("UNKNOWN_EXCEPTION", str(error), query_id)

    def _snapshot(self) -> Answer:
        taken = snapshot.read(self.store)
        body = json.dumps({"moment_ns": taken.moment_ns, "now_ns": taken.now_ns}) + "\n"
        return Answer(200, body.encode(), {"Content-Type": "application/json; charset=UTF-8"})

    def _authenticate(self, request: Request) -> None:
        """``credentials.check``, throttled per source: a locked-out source is refused
        without a check; no password at all is no guess and is not counted."""
        if self.credentials.password is None:
            return
        source = request.source or "an unknown address"
        wait = self.failed_logins.locked_for(source)
        if wait > 0:
            raise Refused("AUTHENTICATION_FAILED", lockout_message(source, wait), wait)
        try:
            self.credentials.check(request.user, request.password)
        except Refused as refused:
            if refused.name == "AUTHENTICATION_FAILED":
                self.failed_logins.failed(source)
            raise
        self.failed_logins.succeeded(source)

    def _statement(self, request: Request) -> str | None:
        parts = [request.parameters.get("query", "")]
        if request.method == "POST":
            if len(request.body) > MAX_QUERY_BYTES:
                raise Refused("QUERY_IS_TOO_LARGE", f"the query is over {MAX_QUERY_BYTES} bytes")
            try:
                parts.append(request.body.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise Refused("CANNOT_PARSE_TEXT", f"the query is not UTF-8: {exc}") from exc
        text = "\n".join(part for part in parts if part.strip())
        if not text.strip():
            if request.method == "POST":
                raise Refused("SYNTAX_ERROR", "Empty query")
            return None
        return text

    def _limits(self, parameters: Mapping[str, str]) -> QueryLimits:
        lowered: dict[str, float] = {}
        for name, value in parameters.items():
            if name in TRANSPORT or name in IGNORED or name.startswith("param_"):
                continue
            if name in LIMIT_SETTINGS:
                try:
                    number = float(value)
                except ValueError:
                    message = f"{name}={value!r}: not a number"
                    raise Refused("CANNOT_PARSE_NUMBER", message) from None
                field_name = LIMIT_SETTINGS[name]
                # 0 means "no limit" to ClickHouse, and no client gets above the ceiling.
                ceiling = getattr(self.limits, field_name)
                lowered[field_name] = min(number, ceiling) if number > 0 else ceiling
                continue
            if name.startswith(("output_format_", "format_")):
                continue  # formatting details: the engine's defaults apply
            raise Refused("READONLY", f"Cannot modify '{name}' setting in readonly mode")
        return self.limits.lowered(**lowered)

    def _run(
        self, request: Request, text: str, query_id: str, abandoned: Callable[[], bool] | None
    ) -> Answer:
        limits = self._limits(request.parameters)
        formatted = self.store.check_user_statement(text)
        output = (
            output_format(formatted)
            or request.parameters.get("default_format")
            or request.headers.get("x-clickhouse-format")
            or DEFAULT_FORMAT
        )
        if output == "Native" and request.parameters.get("client_protocol_version", "0") != "0":
            raise Refused(
                "NOT_IMPLEMENTED",
                "Native with client_protocol_version (block-info framing, as clickhouse-go "
                "and Grafana's ClickHouse datasource ask for) is not served here: the engine "
                "writes Native without it. Ask for Native without client_protocol_version, or "
                "for a text, JSON, Arrow or Parquet format",
            )
        parameters = {
            name.removeprefix("param_"): EncodedValue(value)
            for name, value in request.parameters.items()
            if name.startswith("param_")
        }
        database = request.parameters.get("database") or request.headers.get(
            "x-clickhouse-database"
        )
        started = time.perf_counter_ns()
        body = self.store.user_query(
            text,
            limits,
            parameters=parameters,
            abandoned=abandoned,
            output=output,
            database=database or None,
        )
        assert isinstance(body, bytes)
        elapsed = time.perf_counter_ns() - started
        headers = {
            "Content-Type": content_type(output),
            "X-ClickHouse-Format": output,
            "X-ClickHouse-Query-Id": query_id,
            "X-ClickHouse-Timezone": self._facts().timezone,
            "X-ClickHouse-Summary": json.dumps({"elapsed_ns": str(elapsed)}),
        }
        return Answer(200, body, headers)

    # -- errors ---------------------------------------------------------------------------

    def refusal(self, name: str, message: str, status: int | None = None) -> Answer:
        """A ClickHouse-style error for a request refused before it became a query (a body
        that cannot be read); ``status`` overrides ClickHouse's for ``name``."""
        answer = self._error(name, message, str(uuid.uuid4()))
        return answer if status is None else Answer(status, answer.body, answer.headers)

    def _error(
        self, name: str | None, message: str, query_id: str, code: int = 0, retry_after: float = 0
    ) -> Answer:
        facts = self._facts()
        codes = facts.codes
        if name is not None:
            code = codes.get(name, 1002)
        else:
            name = next((known for known, value in codes.items() if value == code), "")
        message = message.strip().rstrip(".")
        if name and f"({name})" not in message:
            message += f". ({name})"
        version = facts.version
        body = f"Code: {code}. DB::Exception: {message}" + (
            f" (version {version})" if version else ""
        )
        headers = {
            "Content-Type": "text/plain; charset=UTF-8",
            "X-ClickHouse-Exception-Code": str(code),
            "X-ClickHouse-Query-Id": query_id,
        }
        status = _STATUS_BY_NAME.get(name, 500)
        if retry_after > 0:
            status = 429
            headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
        if status == 401:
            headers["WWW-Authenticate"] = 'Basic realm="grpc-overhead", charset="UTF-8"'
        return Answer(status, (body + "\n").encode(), headers)

    def _facts(self) -> _EngineFacts:
        """Error codes by name (``errorCodeToName``), version and time zone, asked once."""
        with self._lock:
            if self._engine is None:
                try:
                    found = self.store.query(
                        "SELECT toUInt32(number) AS code, errorCodeToName(code) AS name "
                        "FROM numbers(1100) WHERE name != ''",
                        readonly=True,
                    )
                    about = self.store.query(
                        "SELECT version() AS version, timezone() AS timezone", readonly=True
                    )
                except AnalyzerError:
                    return _EngineFacts({"UNKNOWN_EXCEPTION": 1002}, "", "UTC")
                codes = dict(zip(found["name"], map(int, found["code"]), strict=True))
                row = about.iloc[0]
                self._engine = _EngineFacts(codes, str(row["version"]), str(row["timezone"]))
            return self._engine


@dataclass(frozen=True)
class _EngineFacts:
    codes: dict[str, int]
    version: str
    timezone: str
