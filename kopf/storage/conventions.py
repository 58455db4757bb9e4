"""
Annotation key conventions: how free-text handler ids become valid annotation names.

Kubernetes restricts annotation keys to ``[prefix/]name``, where the prefix is
a DNS subdomain of at most 253 characters and the name is at most 63
characters of ``[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?``. Handler ids are
free text (``parent/child``, ``fn/spec.field``, unicode, long), so they are
mapped deterministically: a valid id is used as is; anything that had to be
altered or cut gets a short stable hash of the original id appended, so that
two different ids never share a key.
"""
from __future__ import annotations

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


def make_key(prefix: str, handler_id: str) -> str:
    """The full annotation key for a handler id under a prefix."""
    return f"{prefix}/{make_name(handler_id)}"


def split_key(key: str) -> tuple[str | None, str]:
    """Split ``prefix/name`` into its parts; a key without a prefix gives ``None``."""
    prefix, sep, name = key.rpartition('/')
    return (prefix, name) if sep else (None, key)
