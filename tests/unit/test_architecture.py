"""The picture of the packages in docs/architecture.rst is the one the code's imports make now."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parents[2]


def test_the_architecture_picture_is_drawn_from_the_current_imports():
    result = subprocess.run([sys.executable, 'tools/architecture.py', '--check'], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_every_part_of_the_package_is_in_a_layer_of_the_picture():
    sys.path.insert(0, str(REPO / 'tools'))
    try:
        import architecture
    finally:
        sys.path.remove(str(REPO / 'tools'))
    placed = {name for row in architecture.layers() for name in row}
    parts = {path.stem if path.is_file() else path.name for path in (REPO / 'kopf').iterdir()
             if (path.suffix == '.py' and path.stem != '__init__') or (path / '__init__.py').exists()}
    assert parts == placed
