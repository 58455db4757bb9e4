"""
How ``kopf run`` imports the operator's code: as ``python FILE`` and ``python -m MODULE`` would.

Each case runs in a fresh interpreter, since importing changes ``sys.path``
and ``sys.modules`` for good.
"""
import subprocess
import sys
import textwrap
from pathlib import Path

from kopf.cli import script_module_name

REPO = Path(__file__).parents[2]


def load(tmp_path: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Load operator code in a fresh interpreter; ``-m NAME`` for modules, else files."""
    paths = [arg for arg in args if not arg.startswith('-m')]
    modules = [arg[2:] for arg in args if arg.startswith('-m')]
    code = textwrap.dedent(f"""
        import sys
        from kopf.cli import load_operator_code
        load_operator_code({paths!r}, {modules!r})
        print('loaded')
    """)
    return subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=60,
                          cwd=cwd or tmp_path, env={'PYTHONPATH': str(REPO), 'PATH': '/usr/bin:/bin'})


def test_an_operator_file_imports_its_sibling_modules(tmp_path):
    src = tmp_path / 'src'
    src.mkdir()
    (src / 'cache.py').write_text('VALUE = 42\n')
    (src / 'handlers.py').write_text('from cache import VALUE\nassert VALUE == 42\n')
    result = load(tmp_path, 'src/handlers.py')  # from the directory above, as in a repository's root
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == 'loaded'


def test_an_operator_file_named_like_a_standard_module_does_not_shadow_it(tmp_path):
    # An operator called operator.py must not replace the standard 'operator' module for the libraries.
    (tmp_path / 'operator.py').write_text(textwrap.dedent("""
        import sys
        import operator as stdlib_operator
        import functools, collections  # use the standard 'operator' internally
        assert stdlib_operator.mul(6, 7) == 42, stdlib_operator
        assert sys.modules['operator'] is stdlib_operator
        assert __name__ != 'operator'
    """))
    result = load(tmp_path, str(tmp_path / 'operator.py'))
    assert result.returncode == 0, result.stderr


def test_several_files_of_the_same_name_are_all_imported(tmp_path):
    for folder in ('a', 'b'):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / 'handlers.py').write_text(f'open({str(tmp_path / folder / "done")!r}, "w").close()\n')
    result = load(tmp_path, 'a/handlers.py', 'b/handlers.py')
    assert result.returncode == 0, result.stderr
    assert (tmp_path / 'a' / 'done').exists() and (tmp_path / 'b' / 'done').exists()


def test_modules_are_imported_from_the_working_directory(tmp_path):
    (tmp_path / 'mypkg').mkdir()
    (tmp_path / 'mypkg' / '__init__.py').write_text('')
    (tmp_path / 'mypkg' / 'handlers.py').write_text('from . import helpers\n')
    (tmp_path / 'mypkg' / 'helpers.py').write_text('')
    result = load(tmp_path, '-mmypkg.handlers')
    assert result.returncode == 0, result.stderr


def test_files_and_modules_together(tmp_path):
    (tmp_path / 'one.py').write_text('import two_helper\n')
    (tmp_path / 'two_helper.py').write_text('')
    (tmp_path / 'mod.py').write_text('')
    result = load(tmp_path, 'one.py', '-mmod')
    assert result.returncode == 0, result.stderr


def test_the_private_module_names_are_valid_and_distinct():
    names = {script_module_name(0, 'src/my-operator.py'), script_module_name(1, 'other/my-operator.py')}
    assert names == {'__kopf_script_0_my_operator__', '__kopf_script_1_my_operator__'}
    assert all(name.isidentifier() for name in names)
