"""The description of a server, as adapters read it and findings record it: `TargetInfo`, its
normalized facts (`facts`, an `engines.spec.ServerFacts` its engine's module reads from the
engine's own argument names), and the credential redaction every stored description passes.

Low in the logic layer, just above the engine specs it asks, so that the finding file, the
campaign, the adapters and the engine presets all read one record and nothing reads an engine's
server-argument key outside that engine's module.

    >>> info = TargetInfo("vllm", "http://bob:pw@127.0.0.1:8000", server_args={"block_size": 16, "api_key": "sk-1"})
    >>> info.base_url, info.page_size, info.facts.page_size, info.server_args["api_key"]
    ('http://127.0.0.1:8000', 16, 16, '<redacted>')
"""

from __future__ import annotations

import dataclasses
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from servefuzz.anomaly import Promise
from servefuzz.engines.registry import facts_of
from servefuzz.engines.spec import EngineSource, ServerFacts
from servefuzz.model_facts import ModelFacts
from servefuzz.workload import ADAPTER_NAME

__all__ = [
    "DEVICES",
    "KNOWN_STANDINS",
    "REDACTED",
    "TargetInfo",
    "public_url",
    "redact",
    "redact_argv",
    "redact_text",
]

REDACTED = "<redacted>"

# Keys whose values are credentials. Matched on whole `_`-separated words so that `max_tokens`
# or `tokenizer` survive while `api_key`, `--api-key`, `hf_token` and `authorization` do not.
# `token` and `key` count only as the last word (`hf_token`, `access_token`, `--key`,
# `ANTHROPIC_KEY`), so ids such as `eos_token_id` stay readable.
_SECRET = re.compile(
    r"(^|_)(api_?key|secrets?|password|passwd|pass|authorization|auth|credentials?|cookie)(_|$)|(^|_)(token|key)$"
)


# What ran in place of the engine's own machinery (a finding file names only these; anything else
# is dropped): servefuzz's stand-in `sgl_kernel`, and Triton's interpreter running SGLang's own
# kernels on a CPU (engines.sglang.INTERPRETED).
KNOWN_STANDINS = frozenset({"sgl_kernel", "triton-interpreter"})
# What a launch preset's server computes on (`launcher.Launch.device`).
DEVICES = frozenset({"cpu", "cuda"})
# Where servefuzz found the engine it launched (`engines.spec.EngineSource`, by value).
INSTALLS = frozenset(source.value for source in EngineSource)


@dataclass(frozen=True)
class TargetInfo:
    """What a server says about itself, as adapters read it and findings record it.

    `None` where the engine does not tell. `page_size` is the KV page (block) size that
    page-boundary strategies aim at (the facts' page when not given); `facts` are the recorded
    server args as its engine's module reads them (`ServerFacts`: derived, never stored, so a
    finding file of any age has them);
    `faults` are the reference engine's planted bugs (empty for real engines). `auth` says that
    requests carried credentials (an API key, headers), never what they were. Credentials are
    redacted on construction (server args, environment, and the URL: no `user:password@`, no
    secret query value), so a finding or a campaign's config.json never holds one.
    """

    engine: str
    base_url: str
    version: str | None = None
    server_args: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    faults: tuple[str, ...] = ()
    page_size: int | None = None
    max_total_tokens: int | None = None
    vocab_size: int | None = None
    eos_token_id: int | None = None
    auth: bool = False
    # The launch preset's feature profile (`engines.PROFILES`) the server ran under, by name;
    # None when servefuzz did not launch it under one (and in findings older than profiles).
    profile: str | None = None
    # The LoRA adapters the server says it serves, by name. A server's word is untrusted: names
    # outside `workload.ADAPTER_NAME` are dropped, so a request can only ever carry a safe one.
    adapters: tuple[str, ...] = ()
    # The stand-in packages servefuzz put on the server's path in place of the engine's own
    # (`sgl_kernel` for SGLang on a CPU host: src/servefuzz/standins), by name; said by
    # servefuzz, never by the server. Empty when the server ran only its own code.
    standins: tuple[str, ...] = ()
    # What the server computed on when servefuzz launched it from a preset ("cpu", "cuda"), so
    # a report rebuilds the right preset's command (`vllm-gpu`, not `vllm-cpu`); "" when unknown.
    device: str = ""
    # Where servefuzz found the engine it launched from a preset (`EngineSource`'s values: "cache",
    # "engine-python" for the user's own install, "interpreter" for servefuzz's own); said by
    # servefuzz, never by the server. "" when it launched none, or a finding file said another word.
    install: str = ""
    # Where the served model came from, when servefuzz fetched it (`realmodel.provenance_of`: the
    # package, its version and sha256, the licence, the form and how it was converted); said by
    # servefuzz from the model's folder, never by the server. Empty for any other model.
    model: Mapping[str, Any] = field(default_factory=dict)
    # What the served model's architecture keeps per request (its sliding window, recurrent
    # state, experts: `model_facts.read_model_facts` of the model servefuzz launched); said by
    # servefuzz from the model's config.json, never by a real server; the reference engine,
    # which builds its model itself, says it in /server_info (read through `ModelFacts.from_json`,
    # which keeps only well-formed values). Empty when not known.
    architecture: ModelFacts = field(default_factory=ModelFacts)
    facts: ServerFacts = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", public_url(self.base_url))
        object.__setattr__(self, "model", dict(self.model) if isinstance(self.model, Mapping) else {})
        if self.device not in DEVICES:
            object.__setattr__(self, "device", "")  # a finding file's word, kept only when known
        if self.install not in INSTALLS:
            object.__setattr__(self, "install", "")
        object.__setattr__(self, "adapters", tuple(dict.fromkeys(
            a for a in self.adapters if isinstance(a, str) and ADAPTER_NAME.fullmatch(a)))[:64])
        object.__setattr__(self, "server_args", redact(self.server_args))
        object.__setattr__(self, "env", redact(self.env))
        object.__setattr__(self, "faults", tuple(self.faults))
        object.__setattr__(self, "standins", tuple(s for s in self.standins if s in KNOWN_STANDINS))
        facts = facts_of(self.engine, self.server_args, self.env, self.profile)
        if self.page_size is None:
            object.__setattr__(self, "page_size", facts.page_size)
        object.__setattr__(self, "facts", dataclasses.replace(facts, page_size=self.page_size))

    def __hash__(self) -> int:
        return hash((self.engine, self.base_url, self.version, self.faults, self.page_size))

    @property
    def deterministic(self) -> str | None:
        """The server's deterministic (batch-invariant) mode, in words, when it ran in one; None
        otherwise. Under it a request's output is promised not to depend on its batch, so even
        a near-tie flip (`numeric-drift`) breaks the engine's own contract.

        >>> TargetInfo("vllm", "http://127.0.0.1:1", env={"VLLM_BATCH_INVARIANT": "1"}).deterministic
        'VLLM_BATCH_INVARIANT=1'
        >>> TargetInfo("sglang", "http://127.0.0.1:1", server_args={"enable_deterministic_inference": True}).deterministic
        '--enable-deterministic-inference'
        >>> TargetInfo("vllm", "http://127.0.0.1:1").deterministic is None
        True
        """
        return self.facts.deterministic

    @property
    def promise(self) -> Promise | None:
        """What the server's deterministic mode promises, in the engine's own words (the engine
        spec's), when it ran in a mode documented as batch- and cache-invariant; None otherwise.
        A finding holds its near-tie flips to it (`anomaly.held_to`)."""
        return self.facts.promise

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "base_url": self.base_url,
            "version": self.version,
            "server_args": dict(self.server_args),
            "env": dict(self.env),
            "faults": list(self.faults),
            "page_size": self.page_size,
            "max_total_tokens": self.max_total_tokens,
            "vocab_size": self.vocab_size,
            "eos_token_id": self.eos_token_id,
            "auth": self.auth,
            **({"profile": self.profile} if self.profile is not None else {}),
            **({"adapters": list(self.adapters)} if self.adapters else {}),
            **({"standins": list(self.standins)} if self.standins else {}),
            **({"device": self.device} if self.device else {}),
            **({"install": self.install} if self.install else {}),
            **({"model": dict(self.model)} if self.model else {}),
            **({"architecture": self.architecture.to_json()} if self.architecture != ModelFacts() else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TargetInfo:
        return cls(
            engine=d["engine"],
            base_url=d["base_url"],
            version=d.get("version"),
            server_args=dict(d.get("server_args", {})),
            env=dict(d.get("env", {})),
            faults=tuple(d.get("faults", ())),
            page_size=d.get("page_size"),
            max_total_tokens=d.get("max_total_tokens"),
            vocab_size=d.get("vocab_size"),
            eos_token_id=d.get("eos_token_id"),
            auth=bool(d.get("auth", False)),
            profile=d.get("profile"),
            adapters=tuple(d.get("adapters", ())),
            standins=tuple(d.get("standins", ())),
            device=str(d.get("device", "")),
            install=str(d.get("install", "")),
            model=d.get("model") or {},
            architecture=ModelFacts.from_json(d.get("architecture")),
        )


def redact(value: Any) -> Any:
    """`value` (a mapping, a sequence, a string, nested) with credentials redacted: a secret
    key's value, a secret flag's, a secret word's in free text.

    >>> redact({"api_key": "sk-1", "argv": ["--token", "t"], "n": 1})
    {'api_key': '<redacted>', 'argv': ['--token', '<redacted>'], 'n': 1}
    """
    if isinstance(value, Mapping):
        return {k: REDACTED if _is_secret(str(k)) else redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return _redact_argv(value)
    if isinstance(value, str):
        return redact_text(value)
    return value


# A name that holds a credential, in free text: `token`, `key` and the like as its last word
# (`HF_TOKEN`, `OPENAI_API_KEY`, `--api-key`), `secret` anywhere (`CLIENT_SECRET_ID`).
_SECRET_WORD = (
    r"(?:[\w-]*[_-])?"
    r"(?:(?:api[_-]?key|key|token|password|passwd|authorization|credentials?|cookie)(?![\w-])|secrets?[\w-]*)"
)
# The same credentials in free text (a server's log): a flag and its value, a `key: value` or
# `key=value` pair (quoted or not), an HTTP bearer or basic token, or a URL's `user:password@`.
_SECRET_TEXT = re.compile(
    rf"(?i)(?P<flag>(?<![\w-])--{_SECRET_WORD}(?:=|\s+))(?P<fv>[^\s\"',}}]+)"
    rf"|(?P<key>(?<![\w-])[\"']?{_SECRET_WORD}[\"']?\s*[:=]\s*[\"']?)(?P<kv>(?:(?:Bearer|Basic)\s+)?[^\s\"',}}]+)"
    r"|(?P<bearer>\b(?:Bearer|Basic)\s+)(?P<bv>[^\s\"',}]+)"
    r"|(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/\s@\"'<>]+)@"
)


def redact_text(text: str) -> str:
    """`text` with credential values replaced, for logs, argv words and URLs that get stored.

    >>> redact_text("args: {'api_key': 'sk-1', 'max_tokens': 8} --api-key sk-2 eos_token_id=2")
    "args: {'api_key': '<redacted>', 'max_tokens': 8} --api-key <redacted> eos_token_id=2"
    >>> redact_text("HF_TOKEN=hf_1 OPENAI_API_KEY=sk-3 url=http://bob:pw@h:1/x Authorization: Bearer t")
    'HF_TOKEN=<redacted> OPENAI_API_KEY=<redacted> url=http://<redacted>@h:1/x Authorization: <redacted>'
    """

    def hide(m: re.Match[str]) -> str:
        if m.group("scheme"):
            return m.group("scheme") + REDACTED + "@"
        prefix = m.group("flag") or m.group("key") or m.group("bearer")
        return prefix + REDACTED

    return _SECRET_TEXT.sub(hide, text)


def public_url(url: str) -> str:
    """`url` without credentials: no `user:password@`, and the value of a secret query
    parameter redacted. What TargetInfo (so every finding and config.json) stores.

    >>> public_url("https://bob:pw@example.com:8443/v1?api_key=sk-1&x=2")
    'https://example.com:8443/v1?api_key=<redacted>&x=2'
    """
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return redact_text(url)
    netloc = parts.netloc.rpartition("@")[2]
    query = "&".join(
        f"{name}={REDACTED}" if eq and _is_secret(urllib.parse.unquote(name)) else f"{name}{eq}{value}"
        for name, eq, value in (item.partition("=") for item in parts.query.split("&") if item)
    )
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_argv(items: Sequence[Any]) -> list[Any]:
    """`items` with credentials redacted in every form an argv holds them.

    >>> redact_argv(["serve", "--api-key", "sk-1", "--token=abc", "--key", "k", "--port", "80"])
    ['serve', '--api-key', '<redacted>', '--token=<redacted>', '--key', '<redacted>', '--port', '80']
    >>> redact_argv(["env", "HF_TOKEN=hf1", "MY_SECRET=x", "A=1", "-H", "X-Key: v", "http://u:p@h"])
    ['env', 'HF_TOKEN=<redacted>', 'MY_SECRET=<redacted>', 'A=1', '-H', 'X-Key: <redacted>', 'http://<redacted>@h']
    """
    return _redact_argv(items)


# Flags whose value is a whole HTTP header (`curl -H`, servefuzz's own `--header`): the name
# stays readable, the value goes, whatever the header is called.
_HEADER_FLAGS = ("--header", "-H")
_ENV_WORD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)


def _redact_argv(items: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    hide_next = header_next = False
    for item in items:
        if hide_next or header_next:
            out.append(_redact_header(item) if header_next else REDACTED)
            hide_next = header_next = False
        elif isinstance(item, str) and item.startswith("-"):
            name, eq, value = item.partition("=")
            if name in _HEADER_FLAGS:
                out.append(f"{name}={_redact_header(value)}" if eq else item)
                header_next = not eq
            elif _is_secret(name):
                out.append(f"{name}={REDACTED}" if eq else item)
                hide_next = not eq
            else:
                out.append(redact_text(item))
        elif isinstance(item, str) and (env := _ENV_WORD.fullmatch(item)) and _is_secret(env.group(1)):
            out.append(f"{env.group(1)}={REDACTED}")  # `HF_TOKEN=...` before a command
        else:
            out.append(redact(item))
    return out


def _redact_header(value: Any) -> Any:
    if not isinstance(value, str):
        return REDACTED
    name, colon, _ = value.partition(":")
    return f"{name}: {REDACTED}" if colon else REDACTED


def _is_secret(key: str) -> bool:
    return bool(_SECRET.search(key.strip("-").lower().replace("-", "_")))
