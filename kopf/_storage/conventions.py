"""
Annotation key conventions: how free-text handler ids become valid annotation names.

Kubernetes restricts annotation keys to ``[prefix/]name``, where the prefix is
a DNS subdomain of at most 253 characters and the name is at most 63
characters of ``[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?``. Handler ids are
free text (``parent/child``, ``fn/spec.field``, unicode, long), so they are
mapped deterministically: a valid id is used as is; anything that had to be
altered or cut gets a short stable hash of the original id appended, so that
two different ids never share a key.

The released Kopf (0.27 to 1.x) wrote its progress under key forms of its own,
which we read and clean up so that operators move here with objects in the
middle of handling. Those forms, as established by running Kopf itself:

* ``/`` in an id becomes ``.`` (``parent/child`` -> ``parent.child``,
  ``fn/spec.field`` -> ``fn.spec.field``); nothing else is replaced (Kopf
  cannot store ids with other invalid characters at all: the server rejects them).
* A name that is too long is cut and suffixed with ``-`` and a 6-character
  hash: the base64 of the 4-byte BLAKE2b digest, without ``=`` padding, with
  ``+`` and ``/`` replaced by ``-`` and ``.``.
* The "v1" form (all versions from 0.27 on) limits the whole key,
  ``prefix/name``, to 63 characters and hashes the dotted id.
* The "v2" form (0.28 on, written next to v1) limits the name alone to 63
  characters and hashes the original id.
"""
from __future__ import annotations

import base64
import hashlib
import re

MAX_NAME_LENGTH = 63
MAX_PREFIX_LENGTH = 253
HASH_LENGTH = 8

_NAME_RE = re.compile(r'^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$')
_DNS_LABEL_RE = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')
_INVALID_CHARS_RE = re.compile(r'[^-A-Za-z0-9_.]')


def is_valid_name(name: str) -> bool:
    """Whether a string may stand as the name part of an annotation key."""
    return len(name) <= MAX_NAME_LENGTH and bool(_NAME_RE.match(name))


def validate_prefix(prefix: str) -> str:
    """Return the prefix if it is a valid DNS subdomain, else explain what is wrong."""
    if not prefix:
        raise ValueError("The annotation prefix must not be empty (e.g. 'my-op.example.com').")
    if len(prefix) > MAX_PREFIX_LENGTH:
        raise ValueError(
            f"The annotation prefix is {len(prefix)} characters long; "
            f"at most {MAX_PREFIX_LENGTH} are allowed: {prefix!r}")
    for label in prefix.split('.'):
        if not _DNS_LABEL_RE.match(label) or len(label) > 63:
            raise ValueError(
                f"The annotation prefix {prefix!r} is not a DNS subdomain: the part {label!r} "
                f"must be 1-63 lowercase letters, digits or '-', starting and ending "
                f"with a letter or a digit.")
    return prefix


def validate_name(name: str) -> str:
    """Return the name if it is a valid annotation name, else explain what is wrong."""
    if not is_valid_name(name):
        raise ValueError(
            f"{name!r} is not a valid annotation name: it must be 1-{MAX_NAME_LENGTH} "
            f"letters, digits, '-', '_' or '.', starting and ending with a letter or a digit.")
    return name


def make_name(handler_id: str) -> str:
    """
    Map any handler id to a valid annotation name, deterministically.

    Ids that are valid names already stay readable and unchanged. Others are
    sanitised (``/`` becomes ``.``, other invalid characters become ``-``),
    cut to fit, and suffixed with a hash of the original id.
    """
    if is_valid_name(handler_id):
        return handler_id
    digest = hashlib.blake2b(handler_id.encode('utf-8'), digest_size=HASH_LENGTH // 2).hexdigest()
    sanitised = _INVALID_CHARS_RE.sub('-', handler_id.replace('/', '.'))
    room = MAX_NAME_LENGTH - HASH_LENGTH - 1
    readable = sanitised[:room].strip('-_.')
    return f"{readable}-{digest}" if readable else digest


def make_key(prefix: str | None, handler_id: str) -> str:
    """The full annotation key for a handler id under a prefix (or without one)."""
    return join_key(prefix, make_name(handler_id))


def join_key(prefix: str | None, name: str) -> str:
    """``prefix/name``, or just the name when there is no prefix."""
    return f"{prefix}/{name}" if prefix else name


KOPF_HASH_LENGTH = 6


def kopf_hash(text: str) -> str:
    """The short hash that Kopf appends to names it had to cut."""
    digest = hashlib.blake2b(text.encode('utf-8'), digest_size=4).digest()
    return base64.b64encode(digest).decode('ascii').rstrip('=').replace('+', '-').replace('/', '.')


def _kopf_cut(name: str, *, limit: int, hashed: str) -> str:
    if len(name) <= limit:
        return name
    return f"{name[:limit - KOPF_HASH_LENGTH - 1]}-{kopf_hash(hashed)}"


def kopf_v1_name(prefix: str | None, handler_id: str) -> str:
    """Kopf's "v1" name: the whole ``prefix/name`` key within 63 characters."""
    dotted = handler_id.replace('/', '.')
    limit = MAX_NAME_LENGTH - (len(prefix) + 1 if prefix else 0)
    return _kopf_cut(dotted, limit=limit, hashed=dotted)


def kopf_v2_name(handler_id: str) -> str:
    """Kopf's "v2" name: the name part alone within 63 characters."""
    return _kopf_cut(handler_id.replace('/', '.'), limit=MAX_NAME_LENGTH, hashed=handler_id)


def kopf_keys(prefix: str | None, handler_id: str) -> tuple[str, ...]:
    """
    Every key under which Kopf 0.27-1.x may have kept this handler's progress.

    Only valid keys are listed: a form that the server would have rejected
    can never have been written. Our own key may be among them (for ids that
    need no mapping, the forms coincide).
    """
    keys: list[str] = []
    for name in (kopf_v2_name(handler_id), kopf_v1_name(prefix, handler_id)):
        key = join_key(prefix, name)
        if name and _NAME_RE.match(name) and key not in keys:
            keys.append(key)
    return tuple(keys)


def split_key(key: str) -> tuple[str | None, str]:
    """Split ``prefix/name`` into its parts; a key without a prefix gives ``None``."""
    prefix, sep, name = key.rpartition('/')
    return (prefix, name) if sep else (None, key)
