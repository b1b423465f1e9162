"""Secrets taken out of a command line before it is shown or goes into a file others may read
(a recording, a report, explain's output). What counts as a secret:

- the value of a flag llama.cpp's flag table marks secret (``--api-key``, ``-hft``,
  ``--hf-token``), and of any option whose name says it is one (``--openai-api-key``,
  ``--db-password``, ``--auth-token``, ``--secret``), as ``--flag VALUE`` or ``--flag=VALUE``;
- an environment assignment before the command whose name says it is one
  (``HF_TOKEN=...``, ``AWS_SECRET_ACCESS_KEY=...``);
- the user and password of a URL (``https://user:pass@host``) and the values of query
  parameters whose names say they are secrets (``?token=...``, ``&sig=...``);
- a word shaped like a well-known token (``hf_...``, ``sk-...``, ``ghp_...``,
  ``xox?-...``, ``AKIA...``), wherever it is.

Each is replaced by ``***``; everything else stays as it is, spaces included.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

REDACTED = "***"

# the spellings of the flags llama.cpp's table marks secret (a test keeps them the table's):
# spelled here, the monitor's process table does not load the flag table for them
SECRET_FLAGS: frozenset[str] = frozenset(("--api-key", "--hf-token", "-hft"))
# a name (of an option, a variable or a query parameter) that says it holds a secret
_SECRET_NAME = re.compile(
    r"(?i)(?:token|secret|passw(?:or)?d|passphrase|api[-_]?key|access[-_]?key|private[-_]?key"
    r"|credential|auth(?:orization)?$|(?:^|[-_])sig(?:nature)?$|^key$|cookie|session[-_]?id)"
)
# a name that says it is not the secret itself but where one is kept
_NOT_SECRET = re.compile(r"(?i)(?:file|path|dir|env|url|type|len|length|count|id[-_]?only)$")
_ENV_ASSIGNMENT = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.+)$")
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")
# (a value ends before punctuation that ends the word: "...?token=abc: refused" keeps ":")
_QUERY_PARAM = re.compile(
    r"(?P<sep>[?&;])(?P<name>[^=&;#\s]+)=(?P<value>[^&;#\s]*?)(?=[:,.)]*(?:[&;#\s]|$))"
)
_TOKEN_SHAPES = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}"
    r"|glpat-[A-Za-z0-9_-]{20,})\b"
)


def secret_name(name: str) -> bool:
    """Whether an option, variable or parameter called ``name`` holds a secret."""
    bare = name.lstrip("-")
    return bool(_SECRET_NAME.search(bare)) and not _NOT_SECRET.search(bare)


def _secret_flag(word: str) -> bool:
    return word in SECRET_FLAGS or (word.startswith("-") and len(word) > 2 and secret_name(word))


def _redact_word(word: str) -> str:
    """What is secret inside one word: a URL's user and password, secret query values,
    token-shaped words."""
    if "://" in word:
        word = _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", word)
    if "=" in word and ("?" in word or "&" in word):
        word = _QUERY_PARAM.sub(
            lambda m: (
                f"{m.group('sep')}{m.group('name')}={REDACTED}"
                if secret_name(m.group("name")) and m.group("value")
                else m.group(0)
            ),
            word,
        )
    return _TOKEN_SHAPES.sub(REDACTED, word)


def redact_urls(text: str) -> str:
    """``text`` (a message) with the secrets of each URL in it replaced by ``***``: its user
    and password, secret query values (a signed URL's signature, a token)."""
    if "://" not in text:
        return text
    return " ".join(_redact_word(w) if "://" in w else w for w in text.split(" "))


@lru_cache(maxsize=1024)  # the same processes, sample after sample
def redact_command(command: str) -> str:
    """``command`` (a command line as one string, words joined by spaces) with every secret
    in it replaced by ``***``; a secret's value in quotes is masked to its closing quote
    (``--api-key "k 1"`` had shown ``1"``)."""
    words = command.split(" ")
    if '"' in command or "'" in command:  # (a process table's command lines rarely quote)
        words = _quoted_values(words)
    return " ".join(redact_argv(words))


def _quoted_values(words: list[str]) -> list[str]:
    """``words`` with a secret flag's quoted value that spaces split (``"k``, ``1"``) one
    word again."""
    out: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        flag, eq, value = word.partition("=")
        prev = next((w for w in reversed(out) if w), "")
        after = value if eq and _secret_flag(flag) else word if _secret_flag(prev) else ""
        quote = after[:1]
        if quote in ("'", '"') and (len(after) < 2 or not after.endswith(quote)):
            j = i + 1
            while j < len(words) and not words[j].endswith(quote):
                j += 1
            word = " ".join(words[i : j + 1])
            i = j
        out.append(word)
        i += 1
    return out


def redact_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` word by word with every secret replaced by ``***``: a secret flag's value
    (``--api-key V``, ``--api-key=V``), a secret variable (``HF_TOKEN=V``), the word after
    ``Bearer``, a token-shaped word. A value with spaces is one word here, masked whole."""
    out: list[str] = []
    take_value = False  # the word before was a secret flag: this one is its value
    for word in argv:
        if take_value and word:
            take_value = False
            if not word.startswith("-") or word == "-":
                out.append(REDACTED)
                continue
            # another flag: the secret flag had no value; read this word as any other
        if not word:
            out.append(word)
            continue
        if word.startswith("-"):
            flag, eq, value = word.partition("=")
            if _secret_flag(flag):
                if eq:
                    out.append(f"{flag}={REDACTED}" if value else word)
                else:
                    out.append(word)
                    take_value = True
                continue
        else:
            m = _ENV_ASSIGNMENT.match(word)
            if m and secret_name(m.group("name")):
                out.append(f"{m.group('name')}={REDACTED}")
                continue
            if word.strip("'\"").lower() == "bearer":  # an Authorization header's token
                out.append(word)
                take_value = True
                continue
        out.append(_redact_word(word))
    return out
