"""
Which namespaces the operator serves: exact names and patterns (``kopf run -n``).

One pattern is a comma-separated list of globs (``*`` for any characters,
``?`` for one), each optionally negated with ``!``, e.g.
``'myapp-*,!*-pr-*,*-pr-123'``. The first glob is decisive: a namespace that
does not match it does not match the pattern, whatever follows; a leading
negation is read as if ``*`` came before it (everything but ...). After
that, the rightmost glob that matches the namespace decides: a plain one
includes it, a negated one excludes it. Several patterns (``-n`` repeated,
or ``namespaces=[...]``) serve the union of what each of them matches.

A pattern without wildcards, commas or negations is an exact name: it is
served as it is, whether the operator may list namespaces or not. The
others need the namespaces listed and watched to be expanded.

Embedding applications may also give compiled regular expressions
(``kopf.run(namespaces=[re.compile('myapp-.*')])``, as Kopf accepts them):
a namespace matches if the whole name matches the expression.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Iterable

# What users give: a pattern's text, or a compiled regular expression.
NamespaceSpec = str | re.Pattern[str]

# Namespaces are DNS labels: lowercase letters, digits and '-', at most 63 characters.
_NAME_RE = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')
_GLOB_RE = re.compile(r'^[-a-z0-9*?]+$')
_MAX_NAME = 63

_SYNTAX = ("A pattern is a comma-separated list of globs of lowercase letters, digits, '-' and the wildcards "
           "'*' and '?', each optionally negated with a leading '!', e.g. 'myapp-*,!*-pr-*'.")


class NamespacePatternError(ValueError):
    """A namespace pattern that cannot match any namespace as written; the message says why."""


@dataclasses.dataclass(frozen=True)
class _Glob:
    negated: bool
    glob: str

    def matches(self, name: str) -> bool:
        return fnmatch.fnmatchcase(name, self.glob)


@dataclasses.dataclass(frozen=True)
class NamespacePattern:
    """One ``-n`` value: an exact namespace name, or globs with negations (see the module's docstring)."""

    text: str
    globs: tuple[_Glob, ...]
    regex: re.Pattern[str] | None = None

    @classmethod
    def parse(cls, text: NamespaceSpec) -> NamespacePattern:
        """Parse one pattern; raise :class:`NamespacePatternError` naming it if it is malformed."""
        if isinstance(text, re.Pattern):
            return cls(text=text.pattern, globs=(), regex=text)
        if not isinstance(text, str):
            raise NamespacePatternError(f"A namespace must be given as a string, got {type(text).__name__}: "
                                        f"{text!r}.")
        globs: list[_Glob] = []
        for part in text.split(','):
            part = part.strip()
            negated = part.startswith('!')
            glob = part[1:].strip() if negated else part
            if not glob:
                raise NamespacePatternError(f"Invalid namespace pattern {text!r}: it has an empty glob. {_SYNTAX}")
            if not _GLOB_RE.match(glob):
                raise NamespacePatternError(
                    f"Invalid namespace pattern {text!r}: {part!r} has characters that no namespace name has "
                    f"(namespaces are lowercase). {_SYNTAX}")
            globs.append(_Glob(negated=negated, glob=glob))
        pattern = cls(text=text, globs=tuple(globs))
        name = pattern.exact
        if name is not None and (len(name) > _MAX_NAME or not _NAME_RE.match(name)):
            raise NamespacePatternError(
                f"Invalid namespace {text!r}: a namespace name has at most {_MAX_NAME} characters, and starts and "
                f"ends with a lowercase letter or a digit.")
        return pattern

    @property
    def exact(self) -> str | None:
        """The namespace's name if the pattern is a plain name (served as is); else ``None``."""
        if self.regex is None and len(self.globs) == 1 and not self.globs[0].negated and \
                not _has_wildcards(self.globs[0].glob):
            return self.globs[0].glob
        return None

    def matches(self, name: str) -> bool:
        """Whether the namespace is served by this pattern: the first glob decides, then the rightmost match."""
        if self.regex is not None:
            return self.regex.fullmatch(name) is not None
        first, *rest = self.globs
        if first.negated:
            matched = not first.matches(name)  # as if '*' came first: all but these, unless brought back
        elif first.matches(name):
            matched = True
        else:
            return False
        for glob in rest:
            if glob.matches(name):
                matched = not glob.negated
        return matched

    def __str__(self) -> str:
        return self.text


@dataclasses.dataclass(frozen=True)
class NamespaceScope:
    """All the namespaces an operator serves: the union of its patterns."""

    patterns: tuple[NamespacePattern, ...]

    @classmethod
    def parse(cls, texts: Iterable[NamespaceSpec]) -> NamespaceScope:
        """Parse every pattern (duplicates once); raise :class:`NamespacePatternError` for a malformed one."""
        return cls(patterns=tuple(NamespacePattern.parse(text) for text in dict.fromkeys(texts)))

    @property
    def exact_names(self) -> frozenset[str]:
        """The namespaces named exactly: served even when the namespaces cannot be listed."""
        return frozenset(pattern.exact for pattern in self.patterns if pattern.exact is not None)

    @property
    def inexact(self) -> tuple[NamespacePattern, ...]:
        """The patterns that need the cluster's namespaces to be expanded."""
        return tuple(pattern for pattern in self.patterns if pattern.exact is None)

    def matches(self, name: str) -> bool:
        return any(pattern.matches(name) for pattern in self.patterns)

    def select(self, names: Iterable[str]) -> frozenset[str]:
        """Of the existing namespaces, those served."""
        return frozenset(name for name in names if self.matches(name))

    def __str__(self) -> str:
        return ' '.join(repr(pattern.text) for pattern in self.patterns)


def is_exact(text: NamespaceSpec) -> bool:
    """Whether a ``-n`` value names one namespace exactly (no wildcards, commas, negations, or a regex)."""
    return isinstance(text, str) and not any(char in text for char in ',!*?')


def _has_wildcards(glob: str) -> bool:
    return '*' in glob or '?' in glob
