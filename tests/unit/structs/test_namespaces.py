"""Namespace patterns: globs, negations, commas, the decisive first glob, exact names, and malformed patterns."""
import re

import pytest

from kopf._structs.namespaces import NamespacePattern, NamespacePatternError, NamespaceScope, is_exact


@pytest.mark.parametrize('pattern, name, expected', [
    ('default', 'default', True),
    ('default', 'default2', False),
    ('myapp-*', 'myapp-live', True),
    ('myapp-*', 'otherapp-live', False),
    ('myapp-?', 'myapp-1', True),
    ('myapp-?', 'myapp-12', False),
    ('*', 'anything', True),
    # A leading negation: everything but those.
    ('!*-pr-*', 'myapp-live', True),
    ('!*-pr-*', 'myapp-pr-1', False),
    ('!kube-system', 'default', True),
    ('!kube-system', 'kube-system', False),
    # The rightmost matching glob wins.
    ('myapp-*,!*-pr-*', 'myapp-live', True),
    ('myapp-*,!*-pr-*', 'myapp-pr-456', False),
    ('myapp-*,!*-pr-*,*-pr-123', 'myapp-pr-123', True),
    ('myapp-*,!*-pr-*,*-pr-123', 'myapp-pr-456', False),
    ('!*-pr-*,*-pr-123', 'otherapp-pr-123', True),  # the implied leading '*' lets it back in
    # The first glob is decisive: what it does not match, nothing later brings back.
    ('myapp-*,!*-pr-*,*-pr-123', 'otherapp-pr-123', False),
    ('myapp-*,!*-pr-*,*-pr-123', 'otherapp-live', False),
    ('a,b', 'b', False),
    ('a,b', 'a', True),
    # Spaces around the globs are not part of them.
    ('myapp-* , !*-pr-*', 'myapp-pr-1', False),
    ('myapp-* , !*-pr-*', 'myapp-live', True),
])
def test_a_pattern_matches_as_kopf_documents(pattern, name, expected):
    assert NamespacePattern.parse(pattern).matches(name) is expected


def test_the_example_of_kopfs_documentation():
    pattern = NamespacePattern.parse('myapp-*,!*-pr-*,*-pr-123')
    served = {name for name in ['myapp-live', 'myapp-pr-456', 'myapp-pr-123', 'otherapp-live', 'otherapp-pr-123']
              if pattern.matches(name)}
    assert served == {'myapp-live', 'myapp-pr-123'}


def test_several_patterns_serve_the_union_of_what_each_matches():
    scope = NamespaceScope.parse(['myapp-*,!*-pr-*', 'other', 'tools-?'])
    assert scope.select(['myapp-live', 'myapp-pr-1', 'other', 'tools-a', 'tools-ab', 'default']) == {
        'myapp-live', 'other', 'tools-a'}


@pytest.mark.parametrize('pattern, exact', [
    ('default', 'default'),
    (' default ', 'default'),
    ('my-app-1', 'my-app-1'),
    ('my-*', None),
    ('my-?', None),
    ('!default', None),
    ('a,b', None),
    ('a,!b', None),
])
def test_only_plain_names_are_exact(pattern, exact):
    assert NamespacePattern.parse(pattern).exact == exact
    assert is_exact(pattern) is (exact is not None)


def test_a_scope_tells_the_exact_names_apart_from_the_patterns():
    scope = NamespaceScope.parse(['ns1', 'myapp-*', 'ns2', '!kube-*', 'ns1'])
    assert scope.exact_names == {'ns1', 'ns2'}
    assert [pattern.text for pattern in scope.inexact] == ['myapp-*', '!kube-*']
    assert len(scope.patterns) == 4  # the duplicate once


def test_a_scope_of_exact_names_needs_no_listing():
    assert NamespaceScope.parse(['ns1', 'ns2']).inexact == ()


@pytest.mark.parametrize('pattern, words', [
    ('', 'empty glob'),
    ('myapp-*,', 'empty glob'),
    (',myapp-*', 'empty glob'),
    ('!', 'empty glob'),
    ('myapp-*,!', 'empty glob'),
    ('MyApp', 'namespaces are lowercase'),
    ('my_app', 'namespaces are lowercase'),
    ('my/app', 'namespaces are lowercase'),
    ('!!x', 'namespaces are lowercase'),
    ('a!b', 'namespaces are lowercase'),
    ('ns[12]', 'namespaces are lowercase'),
    ('-leading', 'starts and ends with a lowercase letter or a digit'),
    ('trailing-', 'starts and ends with a lowercase letter or a digit'),
    ('x' * 64, 'at most 63 characters'),
])
def test_a_malformed_pattern_is_refused_naming_it_and_the_syntax(pattern, words):
    with pytest.raises(NamespacePatternError) as e:
        NamespacePattern.parse(pattern)
    assert repr(pattern) in str(e.value)
    assert words in str(e.value)
    assert isinstance(e.value, ValueError)


def test_a_glob_may_be_longer_than_a_name_and_start_with_a_wildcard():
    assert NamespacePattern.parse('*-' + 'x' * 70).matches('a-' + 'x' * 70)


def test_a_non_string_namespace_is_refused_clearly():
    with pytest.raises(NamespacePatternError, match='must be given as a string, got int'):
        NamespaceScope.parse([123])  # type: ignore[list-item]


def test_a_compiled_regex_matches_whole_names_as_kopf_accepts_them_in_the_python_api():
    scope = NamespaceScope.parse([re.compile(r'myapp-(live|stage)'), 'other'])
    assert scope.select(['myapp-live', 'myapp-stage', 'myapp-live-2', 'xmyapp-live', 'other']) == {
        'myapp-live', 'myapp-stage', 'other'}
    assert scope.exact_names == {'other'}  # a regex needs the namespaces listed, as a glob does
    assert not is_exact(re.compile('other'))
